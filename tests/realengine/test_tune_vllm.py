"""``ascend-fleet tune`` against a real vLLM fleet: the real control plane, the operator, one real ``vllm serve``.

Each rung patches ``spec.batching.maxBatchSize``; the operator re-renders the engine pod with the rung's
``--max-num-seqs``; the node agent stops the old ``vllm serve`` and starts the new one from the pod's own
command line; SGLang's benchmark client (its ``vllm`` backend: OpenAI completions, streamed) measures the
new engine with the tiny model's own tokenizer. The fleet starts at the first rung, so the ladder restarts
the engine once (for the second rung) and, when the first rung wins, once more for the choice. At most one
real engine runs at a time (``real_engine_limit=1``): the machine is shared. Skipped without the control
plane, the vLLM environment or the client; under ``CI=true`` that fails.
"""

from __future__ import annotations

import os
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.tune import client
from ascend_fleet.tune.choice import Goal
from ascend_fleet.tune.client import Load
from ascend_fleet.tune.fleet import Fleet
from ascend_fleet.tune.ladder import Rung
from ascend_fleet.tune.run import Plan, Progress, run
from ascend_fleet.tune.table import table_hash
from tests.e2e.conftest import fast_settings
from tests.e2e.fleet import Fleet as Fleets
from tests.support.documents import inference

from .server import http
from .support import engine_container, real_vllm_stack, vllm_cpu_or_skip

pytestmark = pytest.mark.timeout(1500)
NAMESPACE = "default"
NAME = "tiny-tune"
MODEL = "tiny-llm"
IMAGE = "registry.example.com/ai/vllm-ascend:v0.23.0.post1-fleet1"
LADDER = (2, 8)
# Short prompts and outputs keep a rung to seconds on two shared cores; every rung sees the same mix.
LOAD = Load(
    request_rate=32, input_tokens=64, output_tokens=16, range_ratio=0.5, prompts_per_slot=3, min_prompts=12
)


def client_or_skip() -> None:
    if client.available():
        return
    if os.environ.get("CI"):
        pytest.fail(client.BENCH_CLIENT_INSTALL_HINT)
    pytest.skip(client.BENCH_CLIENT_INSTALL_HINT)


def test_tune_measures_each_rung_on_a_real_vllm_and_writes_the_choice(tmp_path):
    environment = vllm_cpu_or_skip()
    client_or_skip()
    started = time.monotonic()
    with real_vllm_stack(NAMESPACE, prometheus=True, limit=1) as local:
        assert local.real_engines is not None and local.prometheus is not None
        with OperatorThread(OperatorContext(fast_settings(), local.kube), RunOptions()):
            doc = (
                inference(NAME, MODEL)
                .engine("vllm-ascend", image=IMAGE)
                .spec(batching={"maxBatchSize": LADDER[0]}, rules=[],
                      disruption={"maxUnavailable": 1, "drainSeconds": 1})
                .build()
            )  # fmt: skip
            Fleets(local.kube, NAMESPACE).apply(doc)
            Fleets(local.kube, NAMESPACE).wait_ready(NAME, 1, timeout=400)
            seen: dict[int, tuple[list[str], list[str], int | None, float]] = {}
            served: dict[int, float] = {}

            def measuring(text: str) -> None:
                # What runs while the client measures: the leader pod's command and the real server's argv.
                if text.startswith("measuring"):
                    pod = leader(local.kube)
                    engine = local.real_engines.engine(NAMESPACE, pod["metadata"]["name"])
                    assert engine is not None and engine.process.running, "no real vllm serve for the leader"
                    batch = int(flag(engine_container(pod)["command"], "--max-num-seqs"))
                    seen[batch] = (engine_container(pod)["command"], engine.process.argv, engine.process.pid,
                                   successes(engine.url))  # fmt: skip

            def measured(row) -> None:
                # The same server's own count once the client is done, before the next rung restarts it.
                engine = local.real_engines.engine(NAMESPACE, leader(local.kube)["metadata"]["name"])
                assert engine is not None and engine.process.pid == seen[row.batch_size][2]
                served[row.batch_size] = successes(engine.url) - seen[row.batch_size][3]

            plan = Plan(rungs=[Rung(b) for b in LADDER], goal=Goal(30.0), load=LOAD, model=MODEL,
                        engine="vllm-ascend", fleet=Fleet(local.kube, NAMESPACE, NAME, poll_seconds=0.5),
                        port=8000, tokenizer=environment.model, prometheus=local.prometheus.url,
                        settle_seconds=1.0, rollout_timeout=400, workdir=tmp_path)  # fmt: skip
            outcome = run(plan, Progress(phase=measuring, rung_done=measured))
            last = leader(local.kube)
            stored = AscendInference.model_validate(local.kube.get(names.KIND, NAMESPACE, NAME))
    print(f"\ntune on a real vLLM: {time.monotonic() - started:.0f} s; rows {outcome.rows}")

    # One row per rung, each measured by the real client against the real engine.
    assert [row.batch_size for row in outcome.rows] == list(LADDER)
    for row in outcome.rows:
        assert row.completed == LOAD.prompts(row.batch_size) and row.failed == 0, row
        assert row.tokens_per_second > 0 and 0 < row.ttft_p50_ms <= row.ttft_p99_ms <= row.e2e_p99_ms, row
        assert row.npu_utilization is None  # no NPUs: no figure rather than an invented one
    assert outcome.notes and "no rung has a figure" in outcome.notes[0], outcome.notes
    # Each rung reached the engine: the pod carried its --max-num-seqs and so did the real server's argv.
    assert sorted(seen) == sorted(LADDER)
    for batch, (command, argv, _, _) in seen.items():
        assert flag(command, "--max-num-seqs") == str(batch) and flag(argv, "--max-num-seqs") == str(batch)
    # That server answered the rung's requests: its own success counter counts them and the client's warm-up
    # (a request whose client hangs up as its last token arrives may count as aborted instead).
    assert sorted(served) == sorted(LADDER)
    assert all(0.9 * LOAD.prompts(b) <= served[b] <= LOAD.prompts(b) + 1 for b in LADDER), served
    chosen = outcome.choice.row
    assert outcome.choice.met and chosen is not None and outcome.written, outcome.choice.reason
    # The choice is written: spec.batching, status.tuning with this run's table, and the engine runs it.
    assert stored.spec.batching.max_batch_size == chosen.batch_size
    assert stored.status.tuning is not None and stored.status.tuning.batch_size == chosen.batch_size
    assert stored.status.tuning.table_hash == outcome.table_hash == table_hash(outcome.rows)
    assert [r.batch_size for r in stored.status.tuning.rungs] == list(LADDER)
    assert flag(engine_container(last)["command"], "--max-num-seqs") == str(chosen.batch_size)


def leader(kube) -> dict:
    """Replica 0's leader pod that is not being deleted."""
    pods = kube.list("Pod", NAMESPACE, {names.LABEL_NAME: NAME, names.LABEL_RANK: "0"})
    (pod,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return pod


def flag(argv: list[str], name: str) -> str | None:
    """The value after ``name`` in a command line."""
    return argv[argv.index(name) + 1] if name in argv else None


def successes(url: str) -> float:
    """vLLM's own count of finished requests, from its /metrics."""
    status, text = http("GET", f"{url}/metrics")
    assert status == 200, text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:request_success_total"
    )
