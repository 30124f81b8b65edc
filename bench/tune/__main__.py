"""bench/tune: the tuned batch size against the engine's untuned default, measured in one run.

    python -m bench.tune [--repeats 2] [--request-rate 64]

One simulated vllm-ascend leader (the dev cluster's serving engine, on the seeds' batch curve) without
``--max-num-seqs``, so it batches up to the engine default of 256 sequences. SGLang's benchmark client
drives the same load at every point: tune's ladder (16, 32, 64, 128, as on a 910B) chooses the rung for the
100 ms TTFT p99 target, and the untuned default is measured at 256 concurrent requests (what the engine
admits when nothing limits it). Prints both rows and the chosen rung's tokens/s and TTFT as ratios to the
default's.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path

from ascend_fleet.api import names
from ascend_fleet.devcluster.fleet.engines import SimulatedEngines
from ascend_fleet.devcluster.fleet.scenario import Scenario
from ascend_fleet.devcluster.fleet.serving import DEFAULT_MAX_RUNNING
from ascend_fleet.tune.choice import Goal
from ascend_fleet.tune.client import Load
from ascend_fleet.tune.ladder import Rung, rungs
from ascend_fleet.tune.run import Plan, run
from ascend_fleet.tune.table import format_table


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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tune", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs per point; the least disturbed counts")
    parser.add_argument("--request-rate", type=float, default=64.0)
    args = parser.parse_args()

    load = Load(request_rate=args.request_rate)
    work = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    with SimulatedEngines(Scenario.constant(0.0)) as engines:
        engines.on_pod_running(leader_pod(f"127.{100 + os.getpid() % 100}.{random.randrange(256)}.7"))
        url = f"http://{engines.api_endpoint('bench', 'qwen-0')}"
        common = dict(goal=Goal(), load=load, model="qwen-7b", engine="vllm-ascend", endpoint=url, dry_run=True,
                      repeats=args.repeats)  # fmt: skip
        print(f"load: {load.describe()}; goal: {Goal().describe()}; {args.repeats} runs per point")
        tuned = run(
            Plan(rungs=rungs((16, 32, 64, 128), "vllm-ascend", False), workdir=work / "ladder", **common)
        )
        default = run(Plan(rungs=[Rung(DEFAULT_MAX_RUNNING)], workdir=work / "default", **common))
    chosen, base = tuned.choice.row, default.rows[0]
    print()
    print(format_table([*tuned.rows, base], chosen))
    print(f"(batch {base.batch_size}: the untuned default, the engine's own {DEFAULT_MAX_RUNNING} sequences)")
    print()
    print(f"chosen: {tuned.choice.reason}")
    assert chosen is not None
    print(
        f"tokens/s      chosen {chosen.tokens_per_second:7.0f}  default {base.tokens_per_second:7.0f}  "
        f"ratio {chosen.tokens_per_second / base.tokens_per_second:.2f}"
    )
    print(
        f"TTFT p99 ms   chosen {chosen.ttft_p99_ms:7.0f}  default {base.ttft_p99_ms:7.0f}  "
        f"ratio {chosen.ttft_p99_ms / base.ttft_p99_ms:.2f}"
    )
    print(
        f"TTFT p50 ms   chosen {chosen.ttft_p50_ms:7.0f}  default {base.ttft_p50_ms:7.0f}  "
        f"ratio {chosen.ttft_p50_ms / base.ttft_p50_ms:.2f}"
    )
    print(
        f"E2E p99 ms    chosen {chosen.e2e_p99_ms:7.0f}  default {base.e2e_p99_ms:7.0f}  "
        f"ratio {chosen.e2e_p99_ms / base.e2e_p99_ms:.2f}"
    )


if __name__ == "__main__":
    main()
