"""The operator's half of the benchmark, in a process of its own so that its memory is the operator's alone.

Runs kopf with the operator's watch caches (its indexes; no reconcilers, the benchmark built the pods) and
the real :class:`~ascend_fleet.control.loop.ControlLoop` (Prometheus, decisions and writes). Once the caches
hold the whole fleet it runs a number of cycles, each from every requested source in turn -- ``cache``
(the operator's indexes, no API call) and ``list`` (the old path: two list calls per namespace) -- and
prints one JSON line per cycle, then a summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time

from kubernetes import client

from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.control.loop import ControlLoop, ListSource
from ascend_fleet.handlers.control import control_loop_hook
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread
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


def connect(api: str | None, kubeconfig: str | None) -> Kube:
    if kubeconfig:
        return Kube.connect(kubeconfig)
    configuration = client.Configuration()
    configuration.host = api
    return Kube(client.ApiClient(configuration))


async def wait_for_caches(loop: ControlLoop, objects: int, pods: int, timeout: float = 1800.0) -> float:
    """Until the operator's caches hold every object and pod; returns how long that took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        bodies, grouped = await loop.source.read()
        if len(bodies) >= objects and sum(len(p) for p in grouped.values()) >= pods:
            return time.monotonic() - started
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the caches did not fill within {timeout:.0f}s")


def driver(args: argparse.Namespace, done: threading.Event, summary: dict):
    def run(loop: ControlLoop):
        async def cycles() -> None:
            try:
                summary["cache_fill_seconds"] = round(
                    await wait_for_caches(loop, args.objects, args.pods_total), 1
                )
                summary["idle_rss_mib"] = round(rss_mib(), 1)
                sources = {"cache": loop.source, "list": ListSource(loop.kube)}
                for index in range(args.cycles):
                    for name in args.sources.split(","):
                        started, cpu = time.monotonic(), time.process_time()
                        report = await loop.cycle(sources[name])
                        print(
                            json.dumps(
                                {
                                    "source": name,
                                    "cycle": index,
                                    "objects": report.objects,
                                    "queries": report.queries,
                                    "failed_queries": report.failed_queries,
                                    "decisions": len(report.decisions),
                                    "writes": report.writes,
                                    "list_calls": report.list_calls,
                                    "seconds": round(report.seconds, 3),
                                    "read_seconds": round(report.read_seconds, 3),
                                    "query_seconds": round(report.query_seconds, 3),
                                    "cpu_seconds": round(time.process_time() - cpu, 3),
                                    "rss_mib": round(rss_mib(), 1),
                                    "error": report.error,
                                }
                            ),
                            flush=True,
                        )
                        await asyncio.sleep(max(0.0, args.interval - (time.monotonic() - started)))
            finally:
                done.set()

        return cycles()

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--objects", type=int, required=True)
    parser.add_argument("--pods-total", type=int, required=True)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--step", type=float, default=2.0)
    parser.add_argument("--sources", default="cache,list")
    args = parser.parse_args()
    kube = connect(args.api, args.kubeconfig)
    settings = OperatorSettings.model_validate(
        {
            "prometheus": {"url": args.prometheus, "timeout": "30s"},
            "control": {"interval": args.interval, "step": args.step},
        }
    )
    loop = ControlLoop(settings, kube)
    done, summary = threading.Event(), {"start_rss_mib": round(rss_mib(), 1)}
    ctx = OperatorContext(
        settings,
        kube,
        reconcile=False,
        extra_startup=[control_loop_hook(loop, run=driver(args, done, summary))],
    )
    with OperatorThread(ctx):
        done.wait()
    summary["peak_rss_mib"] = round(peak_rss_mib(), 1)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
