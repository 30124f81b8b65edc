"""bench/reconcile: N AscendInferences against the local API; convergence time and API requests.

    python -m bench.reconcile [--objects 100] [--replicas 2] [--idle 60]

Prints the time until every object reports all replicas Ready, the operator's API requests per object
against the minimum a controller needs (the children it must create plus one status write), split by
kind, and the write requests made during an idle period after convergence (the goal is 0). The local
API counts every HTTP request; the kubelet simulator writes in-process, so what is counted is the
operator's traffic (the benchmark's own requests are subtracted).
"""

from __future__ import annotations

import argparse
import collections
import logging
import time
from pathlib import Path

import yaml

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.devcluster.cluster import DevCluster
from ascend_fleet.devcluster.testing import api_client
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread
from ascend_fleet.kube import Kube

ROOT = Path(__file__).resolve().parents[2]
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


def classify(request) -> str:
    """``METHOD resource[/subresource]`` of one recorded request (watches counted apart)."""
    method = str(request.method.value)
    parts = [p for p in request.url.path.split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2:]
    else:
        parts = parts[-1:]
    resource = "/".join(p for p in parts if p not in {"status", "scale"} and not p.startswith("e2e")) or "?"
    resource = resource.split("/")[0]
    if parts[-1] in {"status", "scale"}:
        resource += "/" + parts[-1]
    if method == "GET" and request.url.query.get("watch") in {"true", "1"}:
        method = "WATCH"
    return f"{method} {resource}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds to watch after convergence")
    parser.add_argument("--verbose", action="store_true", help="print progress while converging")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    template = yaml.safe_load((ROOT / "examples" / "sglang-small.yaml").read_text())
    template["spec"]["parallelism"]["data"] = args.replicas
    settings = OperatorSettings()  # production timers: resync every 30 s
    with DevCluster(start_seconds=0.2, ready_seconds=0.2) as cluster:
        kube = Kube(api_client(cluster.url))
        kube.create_crd(crd())
        with OperatorThread(OperatorContext(settings, kube)):
            time.sleep(1.0)  # let kopf's initial lists and watches settle before counting
            start_index = len(cluster.emulator._requests)
            own = 0
            started = time.monotonic()
            for i in range(args.objects):
                doc = yaml.safe_load(yaml.safe_dump(template))
                doc["metadata"] = {"name": f"llm-{i:04d}", "namespace": "default"}
                kube.create(doc)
                own += 1
            while True:
                items = kube._call("GET", kube._path(names.KIND, "default")).get("items", [])
                own += 1
                ready = sum(1 for o in items if o.get("status", {}).get("readyReplicas") == args.replicas
                            and o.get("status", {}).get("updatedReplicas") == args.replicas)
                print(f"  ready {ready}/{args.objects}", flush=True) if args.verbose else None
                if ready == args.objects:
                    break
                time.sleep(0.5)
            converged = time.monotonic() - started
            time.sleep(2.0)  # the last status writes land
            requests = list(cluster.emulator._requests)[start_index:]
            idle_from = len(cluster.emulator._requests)
            time.sleep(args.idle)
            idle = list(cluster.emulator._requests)[idle_from:]

    kinds = collections.Counter(classify(r) for r in requests)
    kinds["POST ascendinferences"] -= args.objects  # the benchmark's own creates
    kinds["GET ascendinferences"] -= own - args.objects  # and its polling
    operator_total = sum(n for k, n in kinds.items() if not k.startswith("WATCH"))
    children = args.replicas + 3  # pods + serving Service + headless Service + PDB
    minimum = children + 1  # ... and one status write
    idle_writes = [classify(r) for r in idle if str(r.method.value) in WRITES]

    print(f"objects: {args.objects} x {args.replicas} replicas (1 pod each), operator with default timers")
    print(f"time to converge (all replicas Ready): {converged:.1f} s "
          f"({converged / args.objects * 1000:.0f} ms per object)")
    print(f"operator API requests per object: {operator_total / args.objects:.2f} "
          f"(minimum {minimum}: {children} children + 1 status write; ratio "
          f"{operator_total / args.objects / minimum:.2f}x)")
    for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
        if count > 0:
            print(f"  {kind:<40}{count / args.objects:6.2f} per object  ({count})")
    print(f"write requests during {args.idle:.0f} s idle after convergence: {len(idle_writes)} (goal 0)"
          + (f": {collections.Counter(idle_writes)}" if idle_writes else ""))


if __name__ == "__main__":
    main()
