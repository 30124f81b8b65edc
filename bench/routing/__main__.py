"""``python -m bench.routing``: how much of the long tail each routing layer removes, on one mixed-length trace.

One run; per load one trace, replayed against five fleets of the same two replicas (simulated engines on the
real control plane, all requests through upstream Envoy):

- (a) ``service``: Envoy picks a replica at random, as kube-proxy does for the plain ClusterIP Service;
  engines first come, first served;
- (b) ``pool``: ``routing.mode: inferencePool`` with one class: the endpoint picker (queue, KV-cache and
  prefix scorers, flow control) chooses the replica;
- (c) ``pool+classes``: (b) with the seeds' three classes by prompt length, short prompts first (the default
  classes). The client sends prompts only: the classifier in front of the picker names each request's class;
- (d) ``pool+seed-order``: (c) in the order the seed's code wrote, long prompts first;
- (e) ``pool+classes+priority``: (c) with ``scheduling.priority``: the engines schedule by the request's
  ``priority``, which the classifier writes from the class.

The trace has the seeds' length mix (log-normal prompts, median 512 tokens, as the fleet simulator) with
answers an eighth of the simulator's (median 25 tokens), so that a request's own decode stays under a second
and the time over one second is mostly waiting: the seeds' "requests slower than 1 s". Arrivals are Poisson at
each ``--loads`` value times what the fleet serves. Per fleet and load: the share of requests over 1 s end to
end (all, and per class) and by first token, TTFT p50/p99, throughput, shed requests; per load the floor: the
share over 1 s of the same requests alone on an idle engine, from the engine's batch curve. Numbers come from
the client's clock; the run is paced in real time. A fleet that serves nothing, or a figure that is not a
number, fails the run (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.policy import default_classes
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.devcluster.fleet.engines import SimulatedEngines
from ascend_fleet.devcluster.fleet.scenario import Scenario
from ascend_fleet.devcluster.local.ports import free_port
from ascend_fleet.devcluster.real.dataplane import Classifier, Envoy, Picker, ensure_classifier, ensure_picker
from ascend_fleet.devcluster.real.poolendpoints import PoolRef
from ascend_fleet.devcluster.real.realcluster import RealCluster
from ascend_fleet.kube import wait_for
from ascend_fleet.render import Owner, render_all, validate
from ascend_fleet.render.routing import (
    OBJECTIVE_HEADER,
    classifier_args,
    objective_name,
    picker_args,
    picker_config,
    picker_name,
)
from ascend_fleet.simulate.curve import BatchCurve
from ascend_fleet.simulate.flow import seed_order

from .figures import (
    REPLICAS,
    SLOTS,
    LoadRun,
    Outcome,
    Request,
    Result,
    as_json,
    failures,
    figures,
    fleet_rate,
    floor,
    requests_of,
    routing_report,
    routing_trace,
)

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_CRDS = ROOT / "charts" / "ascend-fleet" / "files" / "inference-extension"
NAME = "llm"
FLEETS = ("service", "pool", "pool+classes", "pool+seed-order", "pool+classes+priority")
LOADS = (0.5, 0.75, 0.9, 1.05)
# The seed's order: prompts over 2048 tokens in its queue named "high", the rest below (sizes as the seed's);
# the fleet simulator's classes-seed-order ranks the classes the same way.
SEED_ORDER = [c.model_dump(by_alias=True) for c in seed_order(default_classes())]


def spec_doc(namespace: str, mode: str) -> dict:
    """The AscendInference of one fleet."""
    spec: dict = {
        "model": {"name": "qwen", "path": "/models/qwen"},
        "engine": {"type": "vllm-ascend"},
        "parallelism": {"data": REPLICAS},
        "batching": {"maxBatchSize": SLOTS},
    }
    if mode == "pool":
        spec["routing"] = {
            "mode": "inferencePool",
            "classes": [{"name": "all", "priority": 0, "maxQueue": 100000}],
        }
    elif mode in ("pool+classes", "pool+classes+priority"):
        spec["routing"] = {"mode": "inferencePool"}  # the default classes
    elif mode == "pool+seed-order":
        spec["routing"] = {"mode": "inferencePool", "classes": SEED_ORDER}
    if mode == "pool+classes+priority":
        spec["scheduling"] = {"priority": True}
    return {"apiVersion": names.API_VERSION, "kind": names.KIND,
            "metadata": {"name": NAME, "namespace": namespace}, "spec": spec}  # fmt: skip


def classified(mode: str) -> bool:
    """Whether the server classes this fleet's requests (the classifier in front of the picker)."""
    return mode.startswith("pool+")


def kubectl(cluster: RealCluster, *args: str, input: str | None = None) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig_path), *args], input=input,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


async def send(
    session, url: str, request: Request, header: str | None
) -> tuple[int, float | None, float, int]:
    """(status, TTFT, total seconds, tokens) of one streamed completion."""
    prompt = " ".join([uuid.uuid4().hex, *["w"] * (request.prompt - 1)])
    body = {"model": "qwen", "prompt": prompt, "max_tokens": request.output, "stream": True}
    headers = {OBJECTIVE_HEADER: header} if header else {}
    start = time.monotonic()
    first = None
    try:
        async with session.post(url + "/v1/completions", json=body, headers=headers) as response:
            if response.status != 200:
                await response.read()
                return response.status, None, time.monotonic() - start, 0
            async for line in response.content:
                if first is None and line.startswith(b"data: "):
                    first = time.monotonic() - start
            return 200, first, time.monotonic() - start, request.output
    except (TimeoutError, aiohttp.ClientError):
        return 599, None, time.monotonic() - start, 0


async def replay(url: str, requests: list[Request], obj: AscendInference, mode: str) -> list[Outcome]:
    """The trace in real time; each outcome labelled with the request's seeds' class, whatever the fleet's."""
    seeds = validate(spec_doc("x", "pool+classes")).obj.spec.routing
    routing = obj.spec.routing
    # Only the one-class pool names its objective; classed fleets get prompts only.
    header = objective_name(NAME, routing.classes[0]) if mode == "pool" else None

    async def one(session, request: Request) -> Outcome:
        status, ttft, total, tokens = await send(session, url, request, header)
        return Outcome(seeds.class_for(request.prompt).name, status, ttft, total, tokens)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=600)
    ) as session:
        start = time.monotonic()
        tasks = []
        for request in requests:
            delay = start + request.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, request)))
        return await asyncio.gather(*tasks)


def answers(url: str, obj: AscendInference, mode: str) -> bool:
    """Whether one short request through the fleet's data plane succeeds: the picker has seen its pool and pods.

    Without it a trace shorter than the picker's start-up was shed whole, and the fleet measured nothing.
    """
    warm_up = Request(0.0, 8, 1)
    header = objective_name(NAME, obj.spec.routing.classes[0]) if mode == "pool" else None

    async def one() -> int:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            status, *_ = await send(session, url, warm_up, header)
            return status

    return asyncio.run(one()) == 200


def start_data_plane(cluster: RealCluster, obj: AscendInference, mode: str, workdir: Path) -> list:
    """The picker (and for classed fleets the classifier) with their rendered flags; Envoy last."""
    namespace = Owner.of(obj).namespace
    token = kubectl(cluster, "create", "token", picker_name(NAME), "-n", namespace).strip()
    kubeconfig = cluster.control_plane.write_kubeconfig(workdir / f"{namespace}.kubeconfig", token=token,
                                                        namespace=namespace)  # fmt: skip
    owner = Owner.of(obj)
    ports = {"grpc_port": free_port(), "health_port": free_port(), "metrics_port": free_port()}
    processes: list = [Picker(picker_args(owner, **ports), picker_config(obj.spec), kubeconfig,
                              binary=ensure_picker()).start()]  # fmt: skip
    classifier_port = None
    if classified(mode):
        ports = {"grpc_port": free_port(), "health_port": free_port(), "metrics_port": free_port()}
        classifier = Classifier(
            classifier_args(obj.spec, owner, **ports), kubeconfig, binary=ensure_classifier()
        )
        processes.append(classifier.start())
        classifier_port = classifier.grpc_port
    pool = PoolRef(cluster.kube(), namespace, NAME)
    picker = processes[0]
    envoy = Envoy(
        picker_port=picker.grpc_port, classifier_port=classifier_port, pool=pool, fallbacks=picker.fallbacks
    )
    processes.append(envoy.start())
    return processes


def run_fleet(cluster: RealCluster, mode: str, requests: list[Request], workdir: Path) -> Result:
    """One fleet: render and apply it, start its data plane, replay the trace, tear it all down."""
    namespace = f"bench-{mode.replace('+', '-')}-{uuid.uuid4().hex[:4]}"
    kubectl(cluster, "create", "namespace", namespace)
    engines = SimulatedEngines(Scenario.constant(0.0))
    cluster.kubelet.add_listener(engines)
    processes: list = []
    try:
        obj = validate(spec_doc(namespace, mode)).obj
        objects = render_all(obj)
        kubectl(cluster, "apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        leaders = [o["metadata"]["name"] for o in objects
                   if o["kind"] == "Pod" and o["metadata"]["labels"][names.LABEL_ROLE] == names.ROLE_LEADER]  # fmt: skip
        wait_for(
            lambda: all(engines.api_endpoint(namespace, n) for n in leaders),
            60,
            "serving engines",
            interval=0.2,
        )
        if obj.spec.routing.mode == "inferencePool":
            processes = start_data_plane(cluster, obj, mode, workdir)
        else:
            processes = [Envoy(endpoints=[engines.api_endpoint(namespace, n) for n in leaders]).start()]
        wait_for(
            lambda: answers(processes[-1].url, obj, mode),
            90,
            f"fleet {mode} to answer a request",
            interval=0.2,
        )
        time.sleep(2.0)  # the picker's first scrapes
        began = time.monotonic()
        outcomes = asyncio.run(replay(processes[-1].url, requests, obj, mode))
        return Result(mode, list(outcomes), time.monotonic() - began)
    finally:
        for process in reversed(processes):
            process.stop()
        cluster.kubelet.remove_listener(engines)
        engines.close()
        kubectl(cluster, "delete", "namespace", namespace, "--wait=false")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=12.0, help="length of each load's trace (default 12)"
    )
    parser.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS),
                        help="arrival rates over the fleet's capacity (default 0.5,0.75,0.9,1.05)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fleets", default=",".join(FLEETS))
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run every fleet at every load, print the table (and write the JSON); exit 1 on a failed fleet."""
    args = parse_args(argv)
    curve = BatchCurve()
    capacity = fleet_rate(routing_trace(600, 10.0, args.seed), curve, REPLICAS)
    loads = [float(x) for x in args.loads.split(",")]
    rates = {load: load * capacity for load in loads}
    began = time.monotonic()
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp,
        RealCluster(nodes=REPLICAS, start_seconds=0.2, ready_seconds=0.3) as cluster,
    ):
        kubectl(cluster, "apply", "--server-side", "-f", str(UPSTREAM_CRDS))
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(UPSTREAM_CRDS))
        for load in loads:
            trace = routing_trace(args.seconds, rates[load], args.seed)
            requests = requests_of(trace)
            fleets = {}
            for mode in args.fleets.split(","):
                print(
                    f"load {load:g}: fleet {mode}, {len(requests)} requests ...", file=sys.stderr, flush=True
                )
                fleets[mode] = figures(run_fleet(cluster, mode, requests, Path(tmp)))
            runs.append(LoadRun(load, floor(trace, curve), fleets))
    print(f"# bench/routing: {args.seconds:g} s per load, {REPLICAS} replicas x {SLOTS} slots, "
          f"capacity {capacity:.1f} req/s, seed {args.seed}; run took {time.monotonic() - began:.0f} s\n")  # fmt: skip
    print(routing_report(runs, rates))
    if args.json:
        args.json.write_text(json.dumps(as_json(runs), indent=2) + "\n")
    problems = failures(runs)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
