"""tune's ladder on a real vLLM fleet: the real control plane, the operator, one real ``vllm serve`` at a time.

The same :func:`~ascend_fleet.tune.run.run` as the simulated ladder, with a fleet instead of an endpoint: each
rung patches ``spec.batching.maxBatchSize``, the operator re-renders the engine pod (``--max-num-seqs``), the
node agent restarts vLLM's CPU build from the pod's command line, and SGLang's client measures it with the
tiny model's own tokenizer. ``--dry-run`` semantics: the fleet is thrown away afterwards, so nothing is
written back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.tune.choice import Goal
from ascend_fleet.tune.client import Load
from ascend_fleet.tune.fleet import Fleet
from ascend_fleet.tune.ladder import Rung
from ascend_fleet.tune.run import Outcome, Plan, Progress, run
from ascend_fleet_dev.real.vllm_env import expected_environment, find_environment
from ascend_fleet_dev.stack import stack
from bench.failover import prepare_namespace

NAMESPACE = "bench"
NAME = "tiny-tune"
MODEL = "tiny-llm"
# The project's engine image: the exporter runs beside vLLM (it reports no devices on a CPU host).
IMAGE = "registry.example.com/ai/vllm-ascend:v0.23.0.post1-fleet1"
# A real engine starts in 40-240 s on a shared 2-core machine; the node agent gives it 300 s.
ROLLOUT_TIMEOUT = 600.0


def fleet_document(first: int) -> dict:
    """One vllm-ascend replica starting at the first rung (so the first rung costs no restart), rules off."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "model": {"name": MODEL, "path": f"/models/{MODEL}"},
            "engine": {"type": "vllm-ascend", "image": IMAGE},
            "hardware": {"chip": "ascend910b"},
            "batching": {"maxBatchSize": first},
            "rules": [],
            "disruption": {"maxUnavailable": 1, "drainSeconds": 1},
        },
    }


def real_ladder(
    sizes: Sequence[int], goal: Goal, load: Load, repeats: int, workdir: Path
) -> tuple[Outcome, float]:
    """The ladder measured on one real vLLM engine; the outcome and the wall time in seconds (from the
    fleet's creation: the first engine start is part of what tuning a real fleet costs)."""
    environment = find_environment()
    if environment is None:
        raise SystemExit(
            f"vLLM's CPU environment is not built ({expected_environment().root}): run make engine-vllm"
        )
    with stack(real=True, nodes=1, start_seconds=0.2, ready_seconds=0.3, crds=[crd()], engines="vllm",
               real_engine_limit=1, user_agent="bench") as local:  # fmt: skip
        prepare_namespace(local.kube, NAMESPACE)
        with OperatorThread(OperatorContext(OperatorSettings(), local.kube), RunOptions()):
            began = time.monotonic()
            local.kube.create(fleet_document(sizes[0]))
            fleet = Fleet(local.kube, NAMESPACE, NAME, poll_seconds=0.5)
            fleet.wait_rollout(1, ROLLOUT_TIMEOUT)
            plan = Plan(rungs=[Rung(size) for size in sizes], goal=goal, load=load, model=MODEL,
                        engine="vllm-ascend", fleet=fleet, port=8000, tokenizer=environment.model,
                        dry_run=True, repeats=repeats, rollout_timeout=ROLLOUT_TIMEOUT,
                        workdir=workdir)  # fmt: skip
            outcome = run(plan, _printed())
            return outcome, time.monotonic() - began


def _printed() -> Progress:
    """One line per rung as it starts and ends: a real ladder takes minutes per rung."""
    return Progress(
        rung_started=lambda rung, index, total: print(
            f"  real vLLM: batch {rung.label} ({index + 1}/{total})", flush=True
        ),
        rung_done=lambda row: print(
            f"  real vLLM: batch {row.label}: {row.tokens_per_second:.0f} tokens/s, TTFT p99 {row.ttft_p99_ms:.0f} ms",
            flush=True,
        ),
    )
