"""bench/routing on real engines: the service, pool, pool+classes and pool+adaptive fleets in front of two
``vllm serve``.

The real control plane runs one fleet of two vllm-ascend replicas (4 batch slots each, ``--max-num-seqs 4``);
the node agent runs each engine pod as vLLM's CPU build serving the tiny model
(:class:`~ascend_fleet_dev.real.realengines.RealEngines`). A real engine takes 1 to 4 minutes to start
here, so the fleets share the two engine pods: the fleet's objects are those of ``pool+classes`` plus the
one-class pool's objective, and each fleet is its own data plane (Envoy straight to the engines, or a fresh
picker, with the classifier for classed fleets, behind a fresh Envoy) started for one trace and stopped after
it. The engines are idle between traces: the client waits for every answer.

The trace is scaled to the machine: :func:`calibrate` measures what the two engines serve with 4 requests in
flight on each (the trace's own mix), the loads are shares of that, and the floor is measured, each request
of the trace alone on an idle engine. Prompts are words that are one token each to the tiny model (checked
with vLLM's ``/tokenize`` before anything is measured), cut to fit its context.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from ascend_fleet.api import names
from ascend_fleet.kube import Kube, wait_for
from ascend_fleet.observed import pod_ready
from ascend_fleet.render import render_all, validate
from ascend_fleet_dev.real.dataplane import Envoy
from ascend_fleet_dev.real.realcluster import RealCluster
from ascend_fleet_dev.real.realengines import RealEngines
from ascend_fleet_dev.real.vllm_env import expected_environment, find_environment
from ascend_fleet_dev.stack import stack

from .figures import (
    REPLICAS,
    SLOTS,
    Against,
    Repeats,
    Request,
    Result,
    against_of,
    completion_body,
    fitted,
    requests_of,
    routing_trace,
)
from .fleets import MODEL, UPSTREAM_CRDS, answers, kubectl, replay, send, spec_doc, start_data_plane

NAMESPACE = "bench-vllm"
# Requests of the trace's mix sent in a closed loop to measure the fleet's capacity (about 4 rounds per slot).
CALIBRATION_REQUESTS = 4 * REPLICAS * SLOTS
START_TIMEOUT = 600.0  # both engines start at once: 1 to 4 minutes each on 2 cores


@dataclass
class RealRun:
    """The real fleets' figures and what scaled the trace."""

    repeats: Repeats
    rates: dict[float, float]
    idle: dict[float, Against]
    capacity: float
    start_seconds: float
    seconds: float

    def title(self, args: argparse.Namespace) -> str:
        return (f"# bench/routing, real vLLM engines (vLLM's CPU build, the tiny model, 2 cores): "
                f"{args.real_seconds:g} s per load, {REPLICAS} replicas x {SLOTS} slots, measured capacity "
                f"{self.capacity:.2f} req/s, seed {args.seed}, {args.runs} runs per cell; engines ready after {self.start_seconds:.0f} s, "
                f"took {self.seconds:.0f} s")  # fmt: skip


def model_context(model: Path) -> int:
    """The tiny model's context length in tokens, from its config."""
    return int(json.loads((model / "config.json").read_text())["max_position_embeddings"])


def check_prompt_tokens(url: str, request: Request) -> None:
    """vLLM's own tokenizer must count a real prompt of ``request.prompt`` words as that many tokens."""
    body = completion_body(request, MODEL, real=True)
    status, text = _post(f"{url}/tokenize", {"model": MODEL, "prompt": body["prompt"]})
    counted = json.loads(text).get("count") if status == 200 else None
    if counted not in (request.prompt, request.prompt + 1):  # the tokenizer may add its start token
        raise SystemExit(
            f"a real prompt of {request.prompt} words is {counted} tokens to the engine ({status} {text[:200]})"
        )


def _post(url: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def fleet_objects(namespace: str) -> list[dict]:
    """The objects every real fleet runs on: ``pool+classes``'s, plus the one-class pool's objective."""
    objects = render_all(validate(spec_doc(namespace, "pool+classes")).obj)
    have = {(o["kind"], o["metadata"]["name"]) for o in objects}
    pool = render_all(validate(spec_doc(namespace, "pool")).obj)
    return objects + [
        o
        for o in pool
        if o["kind"] == "InferenceObjective" and (o["kind"], o["metadata"]["name"]) not in have
    ]


def serving_engines(kube: Kube, engines: RealEngines, namespace: str, leaders: list[str]) -> list[str]:
    """The engines' URLs once every leader pod is Ready (its vLLM answered ``/health``)."""

    def ready() -> bool:
        return all(pod_ready(kube.get("Pod", namespace, name)) and engines.engine(namespace, name)
                   for name in leaders)  # fmt: skip

    wait_for(ready, START_TIMEOUT, "both real engines to be Ready", interval=2.0)
    found = [engines.engine(namespace, name) for name in leaders]
    return [engine.url for engine in found if engine is not None]


async def _closed_loop(urls: list[str], requests: list[Request]) -> tuple[int, float]:
    """Requests served and seconds taken with ``SLOTS`` in flight on each engine until ``requests`` run out."""
    waiting = list(requests)
    served = 0

    async def slot(session: aiohttp.ClientSession, url: str) -> None:
        nonlocal served
        while waiting:
            status, *_ = await send(session, url, waiting.pop(0), None, True)
            served += status == 200

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        began = time.monotonic()
        await asyncio.gather(*(slot(session, url) for url in urls for _ in range(SLOTS)))
        return served, time.monotonic() - began


def calibrate(urls: list[str], mix: list[Request]) -> float:
    """Requests per second the engines serve, full: the mix in a closed loop, ``SLOTS`` in flight on each."""
    served, seconds = asyncio.run(_closed_loop(urls, mix[:CALIBRATION_REQUESTS]))
    if served < len(mix[:CALIBRATION_REQUESTS]):
        raise SystemExit(
            f"calibration: the real engines answered {served} of {CALIBRATION_REQUESTS} requests"
        )
    return served / seconds


async def _alone(urls: list[str], requests: list[Request]) -> dict[tuple[int, int], float]:
    times: dict[tuple[int, int], float] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for index, request in enumerate(requests):
            status, _, total, _ = await send(session, urls[index % len(urls)], request, None, True)
            if status != 200:
                raise SystemExit(f"floor: a request alone on an idle engine was answered {status}")
            times[(request.prompt, request.output)] = total
    return times


def idle_times(urls: list[str], traces: dict[float, list[Request]]) -> dict[float, Against]:
    """The idle fleet of each load, measured: every distinct request of the traces sent alone, one at a time."""
    distinct = list({(r.prompt, r.output): r for requests in traces.values() for r in requests}.values())
    times = asyncio.run(_alone(urls, distinct))
    return {
        load: against_of([times[(r.prompt, r.output)] for r in requests]) for load, requests in traces.items()
    }


def run_fleet(cluster: RealCluster, mode: str, urls: list[str], requests: list[Request], workdir: Path) -> Result:  # fmt: skip
    """One trace through one fleet's data plane, started for it and stopped after it."""
    obj = validate(spec_doc(NAMESPACE, mode)).obj
    if obj.spec.routing.mode == "inferencePool":
        processes = start_data_plane(cluster, obj, mode, workdir)
    else:
        processes = [Envoy(endpoints=[url.removeprefix("http://") for url in urls]).start()]
    try:
        wait_for(lambda: answers(processes[-1].url, obj, mode, True), 180,
                 f"fleet {mode} to answer a request", interval=1.0)  # fmt: skip
        time.sleep(2.0)  # the picker's first scrapes
        began = time.monotonic()
        outcomes = asyncio.run(replay(processes[-1].url, requests, obj, mode, True))
        return Result(mode, list(outcomes), time.monotonic() - began)
    finally:
        for process in reversed(processes):
            process.stop()


def real_run(args: argparse.Namespace, workdir: Path) -> RealRun:
    """The real fleets at every load of ``args``: start the engines, scale the trace, replay it per fleet."""
    environment = find_environment()
    if environment is None:
        raise SystemExit(
            f"vLLM's CPU environment is not built ({expected_environment().root}): run make engine-vllm"
        )
    context = model_context(environment.model)
    began = time.monotonic()
    with stack(real=True, nodes=REPLICAS, start_seconds=0.2, ready_seconds=0.3, engines="vllm",
               real_engine_limit=REPLICAS, user_agent="bench") as local:  # fmt: skip
        assert isinstance(local.cluster, RealCluster) and local.real_engines is not None
        cluster = local.cluster
        kubectl(cluster, "apply", "--server-side", "-f", str(UPSTREAM_CRDS))
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(UPSTREAM_CRDS))
        kubectl(cluster, "create", "namespace", NAMESPACE)
        objects = fleet_objects(NAMESPACE)
        kubectl(cluster, "apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        leaders = [o["metadata"]["name"] for o in objects
                   if o["kind"] == "Pod" and o["metadata"]["labels"][names.LABEL_ROLE] == names.ROLE_LEADER]  # fmt: skip
        print("vllm: starting two real engines ...", file=sys.stderr, flush=True)
        urls = serving_engines(local.kube, local.real_engines, NAMESPACE, leaders)
        ready = time.monotonic() - began
        mix = requests_of(fitted(routing_trace(600, 10.0, args.seed), context))
        for request in (min(mix, key=lambda r: r.prompt), max(mix, key=lambda r: r.prompt)):
            check_prompt_tokens(urls[0], request)
        capacity = calibrate(urls, mix)
        rates = {load: load * capacity for load in args.loads}
        traces = {load: requests_of(fitted(routing_trace(args.real_seconds, rates[load], args.seed), context))
                  for load in args.loads}  # fmt: skip
        print(f"vllm: capacity {capacity:.2f} req/s; measuring the floor ...", file=sys.stderr, flush=True)
        idle = idle_times(urls, traces)
        repeats = Repeats()
        for load, requests in traces.items():
            for run in range(1, args.runs + 1):
                for mode in args.real_fleets:
                    print(f"vllm: load {load:g}: fleet {mode}, run {run} of {args.runs}, {len(requests)} "
                          "requests ...", file=sys.stderr, flush=True)  # fmt: skip
                    repeats.add(load, mode, run_fleet(cluster, mode, urls, requests, workdir))
    return RealRun(repeats, rates, idle, capacity, ready, time.monotonic() - began)
