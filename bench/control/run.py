"""Benchmark of the control loop: a synthetic fleet in a real Prometheus and a local Kubernetes API.

What it builds (defaults: 1,000 objects x 4 pods in 10 namespaces):

- a local Kubernetes API (``DevCluster``) holding the AscendInference objects and their engine pods as
  the renderer makes them; the kubelet simulator runs the pods to Ready;
- a real Prometheus scraping one synthetic endpoint that exports, for every pod, NPU utilization,
  memory fragmentation and the vLLM queue, labelled as the engines' scrape labels them;
- 1 % of the objects run hot (utilization above the scale-up threshold), so cycles also write.

Then, for each count of distinct rule windows (1, 2, 4, 8 by default), every object gets two rules
(``npu_utilization > 85%`` at fleet scope, ``mem_fragmentation > 15%`` at replica scope) whose window is
one of that many lengths, and a fresh operator process (kopf's watch caches and the real control loop)
runs a few cycles from each source: its watch cache (what the operator does) and, with ``--baseline
list``, two list calls per namespace (what it did before), so both are measured in the same run.
It prints queries per cycle, list calls, cycle time, the operator's CPU per cycle and its memory.

``--real`` runs the same against the real control plane as well (the fleet's pods scheduled by the real
scheduler onto the node agent's simulated nodes) and prints both backends' rows.

Usage: ``python -m bench.control [--objects 1000] [--pods 4] [--windows 1,2,4,8] [--cycles 4] [--real]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kubernetes.client

from ascend_fleet.api import names
from ascend_fleet.kube import Kube
from ascend_fleet.observed import pod_ready
from ascend_fleet.render import Owner, render_replica, validate
from ascend_fleet_dev.fleet.prometheus import PrometheusServer

from ..backends import backend
from .exporter import FleetShape, SyntheticExporter

ROOT = Path(__file__).resolve().parents[2]
WRITERS = 8  # concurrent API writes while building the fleet
SCRAPE = "2s"  # a scrape of the whole fleet's series must finish within it on a busy 2-core machine


def window_lengths(count: int, base: float, spacing: float) -> list[float]:
    return [base + spacing * index for index in range(count)]


def rules_for(window: float) -> list[dict]:
    return [
        {"metric": "npu_utilization", "threshold": "85%", "for": f"{window:g}s", "action": "scale_up"},
        {
            "metric": "mem_fragmentation",
            "threshold": "15%",
            "for": f"{window:g}s",
            "action": "restart_service",
        },
    ]


def inference(namespace: str, name: str, replicas: int, window: float) -> dict:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": name, "path": "/models/m"},
            "engine": {"type": "vllm-ascend"},
            "parallelism": {"tensor": 1, "pipeline": 1, "data": replicas},
            "rules": rules_for(window),
            # The two rules measured, without the built-in replace rule, so runs compare with earlier logs.
            "safetyRules": False,
            "autoscaling": {
                "minReplicas": 1,
                "maxReplicas": 8,
                "scaleUpCooldown": "10m",
                "restartCooldown": "10m",
            },
        },
    }


def build_fleet(kube: Kube, core: kubernetes.client.CoreV1Api, shape: FleetShape, window: float) -> None:
    """Create the namespaces, the objects and each object's pods (as the reconciler would)."""
    for index in range(shape.namespaces):
        core.create_namespace({"metadata": {"name": f"bench-{index}"}})

    def create(item: tuple[str, str, int]) -> None:
        namespace, name, _ = item
        kube.create(inference(namespace, name, shape.replicas, window))
        body = kube.get(names.KIND, namespace, name)
        valid = validate(body)
        for replica in range(shape.replicas):
            for pod in render_replica(valid.obj.spec, Owner.of(valid.obj), replica, valid.layout):
                kube.create(pod)

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(create, shape.objects_of()))


def set_windows(kube: Kube, shape: FleetShape, windows: list[float]) -> None:
    """Give object i rules over the (i mod len(windows))-th window."""

    def patch(item: tuple[str, str, int]) -> None:
        namespace, name, index = item
        kube.patch(names.KIND, namespace, name, {"spec": {"rules": rules_for(windows[index % len(windows)])}})

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(patch, shape.objects_of()))


def ready_pods(kube: Kube) -> int:
    return sum(1 for pod in kube.list("Pod", None) if pod_ready(pod))


def run_operator(
    connect: list[str],
    prometheus: str,
    shape: FleetShape,
    cycles: int,
    interval: float,
    step: float,
    sources: str,
) -> tuple[list[dict], dict]:
    command = [
        sys.executable,
        "-m",
        "bench.control.operator_side",
        *connect,
        "--prometheus",
        prometheus,
        "--objects",
        str(shape.objects),
        "--pods-total",
        str(shape.objects * shape.replicas),
        "--cycles",
        str(cycles),
        "--interval",
        str(interval),
        "--step",
        str(step),
        "--sources",
        sources,
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"the operator process failed:\n{result.stderr[-3000:]}")
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return lines[:-1], lines[-1]


def summarize(cycles: list[dict]) -> dict:
    steady = cycles[1:] or cycles  # the first cycle writes MetricsAvailable everywhere
    return {
        "queries": cycles[-1]["queries"],
        "objects": cycles[-1]["objects"],
        "first": cycles[0]["seconds"],
        "first_writes": cycles[0]["writes"],
        "cycle": statistics.median(c["seconds"] for c in steady),
        "cycle_max": max(c["seconds"] for c in steady),
        "cpu": statistics.median(c["cpu_seconds"] for c in steady),
        "read": statistics.median(c["read_seconds"] for c in steady),
        "query": statistics.median(c["query_seconds"] for c in steady),
        "lists": statistics.median(c["list_calls"] for c in steady),
        "decisions": sum(c["decisions"] for c in cycles),
        "failed": sum(c["failed_queries"] for c in cycles),
        "rss": cycles[-1]["rss_mib"],
    }


def measure(
    real: bool,
    args: argparse.Namespace,
    shape: FleetShape,
    counts: list[int],
    exporter,
    prometheus,
    scraping_since: float,
) -> list[dict]:
    """Build the fleet on one backend and measure every window count; one row per (count, source)."""
    longest = window_lengths(max(counts), args.base_window, 5.0)[-1]
    sources = "cache" + (",list" if args.baseline == "list" else "")
    rows = []
    with backend(real, shape.objects * shape.replicas, npus_per_pod=1) as api:
        kube = api.kube
        started = time.monotonic()
        build_fleet(kube, kubernetes.client.CoreV1Api(api.client), shape, args.base_window)
        pods = shape.objects * shape.replicas
        while ready_pods(kube) < pods:
            time.sleep(1.0)
        print(
            f"[{api.name}] built {shape.objects} objects and {pods} Ready pods in "
            f"{time.monotonic() - started:.0f}s",
            flush=True,
        )
        # Every window must be full of samples, or the loop only reports InsufficientSamples.
        time.sleep(max(0.0, longest + 3 * args.step - (time.monotonic() - scraping_since)))
        for count in counts:
            set_windows(kube, shape, window_lengths(count, args.base_window, 5.0))
            cycles, summary = run_operator(
                api.connect_args, prometheus.url, shape, args.cycles, args.interval, args.step, sources
            )
            for source in sources.split(","):
                mine = [c for c in cycles if c["source"] == source]
                rows.append(
                    {
                        "backend": api.name,
                        "windows": count,
                        "source": source,
                        **summarize(mine),
                        "idle": summary["idle_rss_mib"],
                        "peak": summary["peak_rss_mib"],
                        "start": summary["start_rss_mib"],
                        "fill": summary["cache_fill_seconds"],
                    }
                )
            print(f"  [{api.name}] {count} distinct windows measured", flush=True)
    return rows


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Control-loop benchmark against a synthetic fleet.")
    parser.add_argument("--objects", type=int, default=1000, help="AscendInference objects (default 1000)")
    parser.add_argument(
        "--pods", type=int, default=4, help="pods (replicas of one pod) per object (default 4)"
    )
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--windows", default="1,2,4,8", help="distinct rule-window counts to measure")
    parser.add_argument(
        "--cycles", type=int, default=4, help="cycles per measurement (the first writes status)"
    )
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between cycles")
    parser.add_argument("--step", type=float, default=2.0, help="subquery step, seconds")
    parser.add_argument("--base-window", type=float, default=20.0, help="shortest rule window, seconds")
    parser.add_argument(
        "--baseline",
        choices=["list", "none"],
        default="list",
        help="also run each cycle the old way, listing objects and pods (default: list)",
    )
    parser.add_argument("--real", action="store_true", help="the real control plane too, rows side by side")
    return parser.parse_args(argv)


def print_table(rows: list[dict]) -> None:
    """One line per measurement."""
    print()
    print(
        "backend | distinct windows | source | list calls/cycle | queries/cycle | objects | "
        "cycle s (median, max) | of which read, Prometheus s | operator CPU s/cycle | first cycle s (writes) | "
        "decisions | operator RSS MiB (caches full -> after, peak)"
    )
    for r in rows:
        print(
            f"{r['backend']} | {r['windows']} | {r['source']} | {r['lists']:g} | {r['queries']} | {r['objects']} | "
            f"{r['cycle']:.2f}, {r['cycle_max']:.2f} | {r['read']:.2f}, {r['query']:.2f} | {r['cpu']:.2f} | "
            f"{r['first']:.2f} ({r['first_writes']}) | {r['decisions']} | "
            f"{r['idle']:.0f} -> {r['rss']:.0f}, {r['peak']:.0f}"
            + (f"  ({r['failed']} failed queries)" if r["failed"] else "")
        )


def print_ratios(rows: list[dict], shape: FleetShape) -> None:
    """Each watch-cache measurement against the list baseline of the same run, and the operator's memory."""
    print()
    for r in rows:
        if r["source"] != "cache":
            continue
        base = next(
            (
                b
                for b in rows
                if b["source"] == "list" and b["backend"] == r["backend"] and b["windows"] == r["windows"]
            ),
            None,
        )
        if base:
            print(
                f"{r['backend']}, {r['windows']} windows: watch-cache cycle {r['cycle']:.2f} s vs list baseline "
                f"{base['cycle']:.2f} s in the same run: {r['cycle'] / base['cycle']:.2f}x (goal <= 0.33x); "
                f"Prometheus {r['query']:.2f} s for {r['queries']} queries"
            )
        print(
            f"{r['backend']}: operator memory with the fleet cached: {r['idle']:.0f} MiB "
            f"({r['start']:.0f} MiB before connecting): {(r['idle'] - r['start']) * 1024 / max(r['objects'], 1):.0f}"
            f" KiB per object of {shape.replicas} pods (caches filled in {r['fill']:.1f} s)"
        )
    print(
        "queries per cycle = 2 rules x (extreme + sample count) x distinct windows; "
        f"one per object would be {shape.objects * 2}, one per pod {shape.objects * shape.replicas * 2}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    counts = [int(c) for c in args.windows.split(",")]
    shape = FleetShape(
        namespaces=max(1, min(args.namespaces, args.objects)),
        objects=args.objects,
        replicas=args.pods,
        hot=max(1, args.objects // 100),
    )

    print(
        f"fleet: {shape.objects} objects x {shape.replicas} pods in {shape.namespaces} namespaces, "
        f"{shape.hot} hot; step {args.step:g}s, scrape {SCRAPE}, windows {args.base_window:g}s + 5s each",
        flush=True,
    )
    exporter = SyntheticExporter(shape)
    job = {
        "job_name": "bench-fleet",
        "honor_labels": True,
        "scrape_interval": SCRAPE,
        "scrape_timeout": SCRAPE,
        "static_configs": [{"targets": [exporter.address]}],
    }
    rows = []
    with PrometheusServer(extra_scrape_configs=[job]) as prometheus:
        scraping_since = time.monotonic()
        for real in [False, True] if args.real else [False]:
            rows += measure(real, args, shape, counts, exporter, prometheus, scraping_since)
        series = prometheus.query('count({job="bench-fleet"})')
        print(
            f"Prometheus holds {int(float(series[0]['value'][1])) if series else 0} fleet series", flush=True
        )
    exporter.close()
    print_table(rows)
    print_ratios(rows, shape)
    return 0
