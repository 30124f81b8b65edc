"""What every bench/routing fleet shares, simulated or real: its AscendInference, its data plane, its client.

A fleet is two replicas behind one routing layer; :func:`start_data_plane` starts the picker (and for classed
fleets the classifier) with the flags the operator renders, then Envoy; :func:`replay` sends a trace through it
in real time and labels every outcome with the request's seeds' class.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import aiohttp

from ascend_fleet.api import names
from ascend_fleet.api.policy import default_classes
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.render import Owner, validate
from ascend_fleet.render.picker_config import OBJECTIVE_HEADER, objective_name, picker_config
from ascend_fleet.render.routing import classifier_args, picker_args, picker_name
from ascend_fleet.simulate.flow import seed_order
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.real.dataplane import Classifier, Envoy, Picker, ensure_classifier, ensure_picker
from ascend_fleet_dev.real.poolendpoints import PoolRef
from ascend_fleet_dev.real.realcluster import RealCluster

from .figures import REPLICAS, SLOTS, Outcome, Request, completion_body

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_CRDS = ROOT / "charts" / "ascend-fleet" / "files" / "inference-extension"
NAME = "llm"
MODEL = "qwen"  # the served model name every request asks for
FLEETS = ("service", "pool", "pool+classes", "pool+seed-order", "pool+classes+priority", "pool+adaptive")
# pool+adaptive: the pool with the adaptive in-flight limit between these bounds (maxBatchSize is the engine's
# SLOTS). The target sits between the pool's first-token p99 at load 0.75 (0.40 s in bench/logs/routing.log,
# the calm the limit should leave alone) and its p50 at load 1.05 (0.66 s, the overload it should notice).
ADAPTIVE_MIN_BATCH = 2
ADAPTIVE_TTFT_TARGET = "500ms"
# The fleets with one class, whose client names the class's objective (no classifier in front of the picker).
ONE_CLASS = ("pool", "pool+adaptive")
LOADS = (0.5, 0.75, 0.9, 1.05)
# The seed's order: prompts over 2048 tokens in its queue named "high", the rest below (sizes as the seed's);
# the fleet simulator's classes-seed-order ranks the classes the same way.
SEED_ORDER = [c.model_dump(by_alias=True) for c in seed_order(default_classes())]


def spec_doc(namespace: str, mode: str) -> dict:
    """The AscendInference of one fleet."""
    spec: dict = {
        "model": {"name": MODEL, "path": f"/models/{MODEL}"},
        "engine": {"type": "vllm-ascend"},
        "parallelism": {"data": REPLICAS},
        "batching": {"maxBatchSize": SLOTS},
    }
    if mode in ONE_CLASS:
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
    if mode == "pool+adaptive":
        spec["batching"] |= {"minBatchSize": ADAPTIVE_MIN_BATCH, "ttftTarget": ADAPTIVE_TTFT_TARGET}
    return {"apiVersion": names.API_VERSION, "kind": names.KIND,
            "metadata": {"name": NAME, "namespace": namespace}, "spec": spec}  # fmt: skip


def classified(mode: str) -> bool:
    """Whether the server classes this fleet's requests (the classifier in front of the picker)."""
    return mode.startswith("pool+") and mode not in ONE_CLASS


def kubectl(cluster: RealCluster, *args: str, input: str | None = None) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig_path), *args], input=input,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


async def send(
    session, url: str, request: Request, header: str | None, real: bool = False
) -> tuple[int, float | None, float, int]:
    """(status, TTFT, total seconds, tokens) of one streamed completion (the real tiny model's prompt with ``real``)."""
    body = completion_body(request, MODEL, real)
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


async def replay(
    url: str, requests: list[Request], obj: AscendInference, mode: str, real: bool = False
) -> list[Outcome]:
    """The trace in real time; each outcome labelled with the request's seeds' class, whatever the fleet's."""
    seeds = validate(spec_doc("x", "pool+classes")).obj.spec.routing
    routing = obj.spec.routing
    # Only the one-class pools name their objective; classed fleets get prompts only.
    header = objective_name(NAME, routing.classes[0]) if mode in ONE_CLASS else None

    async def one(session, request: Request) -> Outcome:
        status, ttft, total, tokens = await send(session, url, request, header, real)
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


def answers(url: str, obj: AscendInference, mode: str, real: bool = False) -> bool:
    """Whether one short request through the fleet's data plane succeeds: the picker has seen its pool and pods.

    Without it a trace shorter than the picker's start-up was shed whole, and the fleet measured nothing.
    """
    warm_up = Request(0.0, 8, 1)
    header = objective_name(NAME, obj.spec.routing.classes[0]) if mode in ONE_CLASS else None

    async def one() -> int:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            status, *_ = await send(session, url, warm_up, header, real)
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
