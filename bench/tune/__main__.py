"""bench/tune: the tuned batch size against the engine's untuned default, measured in one run.

    python -m bench.tune [--repeats 2] [--request-rate 64] [--engines vllm]

One simulated vllm-ascend leader (the dev cluster's serving engine, on the seeds' batch curve) without
``--max-num-seqs``, so it batches up to the engine default of 256 sequences. SGLang's benchmark client
drives the same load at every point: tune's ladder (16, 32, 64, 128, as on a 910B) chooses the rung for the
100 ms TTFT p99 target, and the untuned default is measured at 256 concurrent requests (what the engine
admits when nothing limits it). Prints both rows and the chosen rung's tokens/s and TTFT as ratios to the
default's.

With ``--engines vllm`` the same ladder also runs on a real vLLM fleet (bench/tune/real.py: the real
control plane, the operator, vLLM's CPU build serving the tiny model, one engine restart per rung), and its
table is printed beside the simulated one, each with its wall time.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from ascend_fleet.api import names
from ascend_fleet.tune.choice import Goal
from ascend_fleet.tune.client import Load
from ascend_fleet.tune.ladder import Rung, parse_ladder, rungs
from ascend_fleet.tune.run import Outcome, Plan, run
from ascend_fleet.tune.table import Row, format_table
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.fleet.serving import DEFAULT_MAX_RUNNING

ENGINE_KINDS = ("simulated", "vllm")


def leader_pod(ip: str) -> dict:
    return {
        "metadata": {"namespace": "bench", "name": "qwen-0", "uid": "bench-qwen-0",
                     "labels": {names.LABEL_NAME: "qwen", names.LABEL_REPLICA: "0", names.LABEL_RANK: "0",
                                names.LABEL_ROLE: names.ROLE_LEADER}},
        "spec": {"containers": [{"name": "engine",
                                 "command": ["vllm", "serve", "/models/qwen", "--served-model-name", "qwen-7b",
                                             "--port", "8000"],
                                 "ports": [{"name": "npu-metrics", "containerPort": 9410}],
                                 "resources": {"limits": {"huawei.com/Ascend910": "8"}}}]},
        "status": {"phase": "Running", "podIP": ip},
    }  # fmt: skip


def simulated(sizes: list[int], load: Load, repeats: int, work: Path) -> tuple[Outcome, Row, float]:
    """The ladder and the untuned default on one simulated leader; and the ladder's wall time."""
    with SimulatedEngines(Scenario.constant(0.0)) as engines:
        engines.on_pod_running(leader_pod(f"127.{100 + os.getpid() % 100}.{random.randrange(256)}.7"))
        url = f"http://{engines.api_endpoint('bench', 'qwen-0')}"
        common = dict(goal=Goal(), load=load, model="qwen-7b", engine="vllm-ascend", endpoint=url, dry_run=True,
                      repeats=repeats)  # fmt: skip
        began = time.monotonic()
        tuned = run(Plan(rungs=rungs(sizes, "vllm-ascend", False), workdir=work / "ladder", **common))
        seconds = time.monotonic() - began
        default = run(Plan(rungs=[Rung(DEFAULT_MAX_RUNNING)], workdir=work / "default", **common))
    return tuned, default.rows[0], seconds


def print_ladder(title: str, outcome: Outcome, seconds: float, extra: list[Row] | None = None) -> None:
    """One engine kind's table (same columns for every kind), its notes, its choice and its wall time."""
    print(f"\n{title}: the ladder in {seconds:.0f} s")
    print(format_table([*outcome.rows, *(extra or [])], outcome.choice.row))
    for note in outcome.notes:
        print(note)
    print(("chosen: " if outcome.choice.met else "no rung met the goal: ") + outcome.choice.reason)


def print_against_default(chosen: Row, base: Row) -> None:
    for what, attribute in (("tokens/s    ", "tokens_per_second"), ("TTFT p99 ms ", "ttft_p99_ms"),
                            ("TTFT p50 ms ", "ttft_p50_ms"), ("E2E p99 ms  ", "e2e_p99_ms")):  # fmt: skip
        mine, theirs = getattr(chosen, attribute), getattr(base, attribute)
        print(f"{what}  chosen {mine:7.0f}  default {theirs:7.0f}  ratio {mine / theirs:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tune", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs per point; the least disturbed counts")
    parser.add_argument("--request-rate", type=float, default=64.0)
    parser.add_argument("--ladder", default="16,32,64,128", help="batch sizes (default: %(default)s)")
    parser.add_argument(
        "--engines",
        choices=ENGINE_KINDS,
        default="simulated",
        help="simulated: the simulated leader only; vllm: also the same ladder on a real vLLM fleet",
    )
    args = parser.parse_args()

    sizes = parse_ladder(args.ladder)
    load = Load(request_rate=args.request_rate)
    work = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    print(f"load: {load.describe()}; goal: {Goal().describe()}; {args.repeats} runs per point")
    tuned, base, seconds = simulated(sizes, load, args.repeats, work)
    print_ladder("simulated vllm-ascend (the seeds' batch curve)", tuned, seconds, [base])
    print(f"(batch {base.batch_size}: the untuned default, the engine's own {DEFAULT_MAX_RUNNING} sequences)")
    assert tuned.choice.row is not None
    print_against_default(tuned.choice.row, base)
    if args.engines == "vllm":
        from .real import real_ladder

        outcome, seconds = real_ladder(sizes, Goal(), load, args.repeats, work / "vllm")
        print_ladder("real vLLM (vLLM's CPU build, the tiny random-weight model, 2 cores)", outcome, seconds)


if __name__ == "__main__":
    main()
