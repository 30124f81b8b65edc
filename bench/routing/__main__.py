"""``python -m bench.routing``: how much of the long tail each routing layer removes, on one mixed-length trace.

One run, one trace, three fleets of the same two replicas (simulated engines on the real control plane, all
requests through upstream Envoy):

- (a) ``service``: Envoy picks a replica at random, as kube-proxy does for the plain ClusterIP Service;
  engines first come, first served;
- (b) ``pool``: ``routing.mode: inferencePool`` with one class: the endpoint picker (queue, KV-cache and
  prefix scorers, flow control) chooses the replica;
- (c) ``pool+classes``: (b) with the seeds' three classes by prompt length (the client names each request's
  objective in ``x-gateway-inference-objective``) and ``scheduling.policy: short-request-first`` in the
  engines (vllm-ascend's scheduler, at the default 512-token threshold).

The trace has the seeds' length mix (log-normal prompts, median 512 tokens, as the fleet simulator) with
answers an eighth of the simulator's (median 25 tokens), so that a request's own decode stays under a second
and the time over one second is waiting: the seeds' "requests slower than 1 s". Arrivals are Poisson at
``--load`` times what the fleet serves, so queues form. Per class: requests, share over 1 s (end to end),
TTFT p50/p99, shed (refused) requests; and the fleet's throughput; then every figure of (b) and (c) as a
ratio to (a). Numbers come from the client's clock; the run is paced in real time (about 4 x ``--seconds``).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.devcluster.fleet.engines import SimulatedEngines
from ascend_fleet.devcluster.fleet.scenario import Scenario
from ascend_fleet.devcluster.local.ports import free_port
from ascend_fleet.devcluster.real.dataplane import Envoy, Picker, ensure_picker
from ascend_fleet.devcluster.real.realcluster import RealCluster
from ascend_fleet.kube import wait_for
from ascend_fleet.render import Owner, render_all, validate
from ascend_fleet.render.routing import (
    OBJECTIVE_HEADER,
    objective_name,
    picker_args,
    picker_config,
    picker_name,
)
from ascend_fleet.simulate.curve import BatchCurve
from ascend_fleet.simulate.traces import (
    OUTPUT_MEDIAN,
    OUTPUT_SIGMA,
    PROMPT_MEDIAN,
    PROMPT_RANGE,
    PROMPT_SIGMA,
)

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_CRDS = ROOT / "charts" / "ascend-fleet" / "files" / "inference-extension"
NAME = "llm"
REPLICAS = 2
SLOTS = 4
OUTPUT_SCALE = 1 / 8
SLOW = 1.0
CLASS_ORDER = ("short", "medium", "long")


@dataclass(frozen=True)
class Request:
    at: float
    prompt: int
    output: int


@dataclass
class Outcome:
    cls: str
    status: int
    ttft: float | None
    total: float
    tokens: int


@dataclass
class Result:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0


def trace(seconds: float, rate: float, seed: int) -> list[Request]:
    """Poisson arrivals at ``rate``; prompts with the seeds' length mix, short answers (see the module doc)."""
    rng = random.Random(f"{seed}:routing")
    requests, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return requests
        prompt = min(max(round(rng.lognormvariate(math.log(PROMPT_MEDIAN), PROMPT_SIGMA)), PROMPT_RANGE[0]),
                     PROMPT_RANGE[1])  # fmt: skip
        output = max(4, round(rng.lognormvariate(math.log(OUTPUT_MEDIAN * OUTPUT_SCALE), OUTPUT_SIGMA)))
        requests.append(Request(t, prompt, min(output, 256)))


def fleet_rate(requests: list[Request], curve: BatchCurve) -> float:
    """Requests per second two full replicas serve for this mix: slots / (prefill + decode) per replica."""
    prefill = statistics.fmean(curve.first_token(SLOTS) * r.prompt / 512 for r in requests)
    decode = statistics.fmean(r.output for r in requests) / curve.per_sequence_rate(SLOTS)
    return REPLICAS * SLOTS / (prefill + decode)


def spec_doc(namespace: str, mode: str) -> dict:
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
    elif mode == "pool+classes":
        spec["routing"] = {"mode": "inferencePool"}  # the seeds' classes, the default
        spec["scheduling"] = {"policy": "short-request-first"}
    return {"apiVersion": names.API_VERSION, "kind": names.KIND,
            "metadata": {"name": NAME, "namespace": namespace}, "spec": spec}  # fmt: skip


def kubectl(cluster: RealCluster, *args: str, input: str | None = None) -> str:
    import subprocess

    result = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig_path), *args], input=input,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


async def send(
    session, url: str, request: Request, header: str | None
) -> tuple[int, float | None, float, int]:
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


async def replay(url: str, requests: list[Request], obj: AscendInference, classes: bool) -> list[Outcome]:
    routing = obj.spec.routing
    seeds = validate(spec_doc("x", "pool+classes")).obj.spec.routing  # the seeds' classes, for the report

    async def one(session, request: Request) -> Outcome:
        cls = seeds.class_for(request.prompt).name
        header = None
        if routing.mode == "inferencePool":
            chosen = routing.class_for(request.prompt) if classes else routing.classes[0]
            header = objective_name(NAME, chosen)
        status, ttft, total, tokens = await send(session, url, request, header)
        return Outcome(cls, status, ttft, total, tokens)

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


def run_fleet(cluster: RealCluster, mode: str, requests: list[Request], workdir: Path) -> Result:
    namespace = f"bench-{mode.replace('+', '-')}-{uuid.uuid4().hex[:4]}"
    kubectl(cluster, "create", "namespace", namespace)
    engines = SimulatedEngines(Scenario.constant(0.0))
    cluster.kubelet.add_listener(engines)
    picker = envoy = None
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
            token = kubectl(cluster, "create", "token", picker_name(NAME), "-n", namespace).strip()
            kubeconfig = cluster.control_plane.write_kubeconfig(workdir / f"{namespace}.kubeconfig", token=token,
                                                                namespace=namespace)  # fmt: skip
            args = picker_args(
                Owner.of(obj), grpc_port=free_port(), health_port=free_port(), metrics_port=free_port()
            )
            picker = Picker(args, picker_config(obj.spec), kubeconfig, binary=ensure_picker()).start()
            envoy = Envoy(picker_port=picker.grpc_port).start()
        else:
            envoy = Envoy(endpoints=[engines.api_endpoint(namespace, n) for n in leaders]).start()
        time.sleep(2.0)  # the picker's first scrapes
        began = time.monotonic()
        outcomes = asyncio.run(replay(envoy.url, requests, obj, classes=mode == "pool+classes"))
        return Result(mode, list(outcomes), time.monotonic() - began)
    finally:
        for process in (envoy, picker):
            if process is not None:
                process.stop()
        cluster.kubelet.remove_listener(engines)
        engines.close()
        kubectl(cluster, "delete", "namespace", namespace, "--wait=false")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


@dataclass(frozen=True)
class Row:
    requests: int
    slow: float
    slow_first_token: float
    ttft_p50: float
    ttft_p99: float
    shed: int


def row(outcomes: list[Outcome]) -> Row:
    served = [o for o in outcomes if o.status == 200]
    ttfts = [o.ttft for o in served if o.ttft is not None]
    slow = sum(o.total > SLOW for o in served) / len(served) if served else float("nan")
    slow_first = sum(t > SLOW for t in ttfts) / len(ttfts) if ttfts else float("nan")
    return Row(
        len(outcomes),
        slow,
        slow_first,
        percentile(ttfts, 0.5),
        percentile(ttfts, 0.99),
        len(outcomes) - len(served),
    )


def report(results: list[Result], rate: float, capacity: float, seconds: float) -> str:
    base = results[0]
    lines = [
        f"# bench/routing: {len(base.outcomes)} requests over {seconds:g} s at {rate:.1f} req/s "
        f"({rate / capacity:.0%} of what {REPLICAS} replicas x {SLOTS} slots serve)",
        "",
        "| fleet | class | requests | over 1 s (end to end) | first token over 1 s | TTFT p50 | TTFT p99 | shed | "
        "throughput (tok/s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    figures: dict[tuple[str, str], Row] = {}
    for result in results:
        throughput = sum(o.tokens for o in result.outcomes) / result.seconds
        for cls in (*CLASS_ORDER, "all"):
            chosen = result.outcomes if cls == "all" else [o for o in result.outcomes if o.cls == cls]
            r = row(chosen)
            figures[(result.name, cls)] = r
            shown = f"{throughput:.0f}" if cls == "all" else ""
            lines.append(f"| {result.name} | {cls} | {r.requests} | {r.slow:.1%} | {r.slow_first_token:.1%} | "
                         f"{r.ttft_p50:.2f} s | {r.ttft_p99:.2f} s | {r.shed} | {shown} |")  # fmt: skip
        figures[(result.name, "throughput")] = throughput  # type: ignore[assignment]
    lines += ["", "Ratios to (a) service (all classes; below 1 is better, throughput above 1 is better):", ""]
    a = figures[(base.name, "all")]
    for result in results[1:]:
        r = figures[(result.name, "all")]
        lines.append(
            f"- {result.name}: over 1 s {_ratio(r.slow, a.slow)}, first token over 1 s "
            f"{_ratio(r.slow_first_token, a.slow_first_token)}, TTFT p50 {_ratio(r.ttft_p50, a.ttft_p50)}, "
            f"TTFT p99 {_ratio(r.ttft_p99, a.ttft_p99)}, throughput "
            f"{_ratio(figures[(result.name, 'throughput')], figures[(base.name, 'throughput')])}, shed {r.shed}"
        )
    lines += ["", "The seeds' claim for their length-class scheduler: requests over 1 s from 18 % to 5 %."]
    return "\n".join(lines)


def _ratio(value: float, baseline: float) -> str:
    if not baseline or math.isnan(baseline) or math.isnan(value):
        return "n/a"
    return f"{value / baseline:.2f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the trace (default 60)")
    parser.add_argument("--load", type=float, default=0.95, help="arrival rate over the fleet's capacity")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fleets", default="service,pool,pool+classes")
    args = parser.parse_args(argv)
    probe = trace(600, 10.0, args.seed)
    capacity = fleet_rate(probe, BatchCurve())
    rate = args.load * capacity
    requests = trace(args.seconds, rate, args.seed)
    print(
        f"{len(requests)} requests, {rate:.1f} req/s; building/starting the control plane ...",
        file=sys.stderr,
    )
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp,
        RealCluster(nodes=REPLICAS, start_seconds=0.2, ready_seconds=0.3) as cluster,
    ):
        kubectl(cluster, "apply", "--server-side", "-f", str(UPSTREAM_CRDS))
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(UPSTREAM_CRDS))
        for mode in args.fleets.split(","):
            print(f"fleet {mode} ...", file=sys.stderr, flush=True)
            results.append(run_fleet(cluster, mode, requests, Path(tmp)))
    print(report(results, rate, capacity, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
