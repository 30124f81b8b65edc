"""The operator's half of the benchmark, in a process of its own so that its memory is the operator's alone.

Runs the real :class:`~ascend_fleet.control.loop.ControlLoop` (Kubernetes API, Prometheus, decisions and
writes) for a number of cycles and prints one JSON line per cycle, then a summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from kubernetes import client

from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.kube import Kube


def _status_mib(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mib() -> float:
    """Resident memory of this process now."""
    return _status_mib("VmRSS")


def peak_rss_mib() -> float:
    """The most this process has held (VmHWM; ru_maxrss would count the parent's memory at fork)."""
    return _status_mib("VmHWM")


async def cycles(loop: ControlLoop, count: int, interval: float) -> None:
    for index in range(count):
        started, cpu = time.monotonic(), time.process_time()
        report = await loop.cycle()
        print(json.dumps({
            "cycle": index, "objects": report.objects, "queries": report.queries,
            "failed_queries": report.failed_queries, "decisions": len(report.decisions), "writes": report.writes,
            "seconds": round(report.seconds, 3), "read_seconds": round(report.read_seconds, 3),
            "query_seconds": round(report.query_seconds, 3), "cpu_seconds": round(time.process_time() - cpu, 3),
            "rss_mib": round(rss_mib(), 1), "error": report.error,
        }), flush=True)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", required=True)
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--step", type=float, default=2.0)
    args = parser.parse_args()
    configuration = client.Configuration()
    configuration.host = args.api
    kube = Kube(client.ApiClient(configuration))
    settings = OperatorSettings.model_validate({
        "prometheus": {"url": args.prometheus, "timeout": "30s"},
        "control": {"interval": args.interval, "step": args.step},
    })
    loop = ControlLoop(settings, kube)
    idle = rss_mib()
    asyncio.run(cycles(loop, args.cycles, args.interval))
    print(json.dumps({"idle_rss_mib": round(idle, 1), "peak_rss_mib": round(peak_rss_mib(), 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
