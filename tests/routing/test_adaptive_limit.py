"""The adaptive in-flight limit in the real picker: upstream Envoy and the picker in front of simulated engines.

The picker built from tools/epp runs with the configuration the operator renders for ``batching.ttftTarget``:
it must accept the plugin, and the plugin's hooks must see the real director's requests and responses. With
a 1 ms target every first token is late, so each endpoint's limit, read from the picker's own metrics, falls
from ``maxBatchSize`` by a quarter per request it answered, down to ``minBatchSize``, and every request is
still served.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
import uuid

import aiohttp
import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.kube import scaled, wait_for
from ascend_fleet.render import Owner, render_all, validate
from ascend_fleet.render.picker_config import OBJECTIVE_HEADER, objective_name, picker_config
from ascend_fleet.render.routing import picker_args, picker_name
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.dataplane import Envoy, Picker, free_port
from ascend_fleet_dev.real.poolendpoints import PoolRef
from tests.routing.test_dataplane import binaries, pool_namespace  # noqa: F401 (binaries: a fixture)
from tests.support.documents import inference

pytestmark = pytest.mark.e2e
NAME = "llm"
SLOTS, FLOOR = 4, 2
LIMIT = re.compile(r'^ascend_fleet_adaptive_batch_limit\{endpoint="([^"]+)"\} (\S+)$', re.M)


def limits(picker: Picker) -> dict[str, float]:
    """Each endpoint's limit as the picker's metrics endpoint shows it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{picker.metrics_port}/metrics", timeout=5) as response:
        return {endpoint: float(value) for endpoint, value in LIMIT.findall(response.read().decode())}


async def complete(url: str, header: str) -> int:
    body = {"model": "qwen", "prompt": f"{uuid.uuid4().hex} word word", "max_tokens": 4, "stream": True}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        session.post(url + "/v1/completions", json=body, headers={OBJECTIVE_HEADER: header}) as response,
    ):
        await response.read()
        return response.status


def test_late_first_tokens_bring_each_limit_down_to_the_floor(real_cluster, binaries, tmp_path):  # noqa: F811
    namespace = pool_namespace(real_cluster, "adaptive")
    engines = SimulatedEngines(Scenario.constant(0.0))
    real_cluster.kubelet.add_listener(engines)
    picker = envoy = None
    try:
        doc = (
            inference(NAME, "qwen")
            .namespace(namespace)
            .engine("vllm-ascend")
            .parallelism(data=2)
            .section("batching", maxBatchSize=SLOTS, minBatchSize=FLOOR, ttftTarget="1ms")
            .routing("inferencePool", classes=[{"name": "all", "priority": 0, "maxQueue": 64}])
            .build()
        )
        obj = validate(doc).obj
        objects = render_all(obj)
        real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        leaders = [o["metadata"]["name"] for o in objects
                   if o["kind"] == "Pod" and o["metadata"]["labels"][names.LABEL_ROLE] == names.ROLE_LEADER]  # fmt: skip
        wait_for(lambda: all(engines.api_endpoint(namespace, n) for n in leaders), 60, "serving engines",
                 interval=0.2)  # fmt: skip
        token = real_cluster.kubectl("create", "token", picker_name(NAME), "-n", namespace).stdout.strip()
        kubeconfig = real_cluster.cluster.control_plane.write_kubeconfig(
            tmp_path / "kubeconfig", token=token, namespace=namespace
        )
        args = picker_args(
            Owner.of(obj), grpc_port=free_port(), health_port=free_port(), metrics_port=free_port()
        )
        picker = Picker(args, picker_config(obj.spec), kubeconfig, binary=binaries[0]).start(
            timeout=scaled(60.0)
        )
        envoy = Envoy(picker_port=picker.grpc_port, pool=PoolRef(real_cluster.kube, namespace, NAME),
                      fallbacks=picker.fallbacks).start(timeout=scaled(60.0))  # fmt: skip
        header = objective_name(NAME, obj.spec.routing.classes[0])

        def answers() -> bool:
            try:
                return asyncio.run(asyncio.wait_for(complete(envoy.url, header), 5)) == 200
            except (TimeoutError, aiohttp.ClientError):
                return False

        wait_for(answers, 90, "a request through Envoy and the picker", interval=0.2)
        # Sequential requests: each answered one is a late first token on the endpoint that served it.
        statuses = [asyncio.run(complete(envoy.url, header)) for _ in range(12)]
        assert statuses == [200] * 12
        seen = wait_for(lambda: limits(picker) or None, 10, "the limit gauge", interval=0.2)
        # The picker names an endpoint <namespace>/<pod>-rank-<port's index>; each leader serves one port.
        assert set(seen) == {f"{namespace}/{leader}-rank-0" for leader in leaders}, seen
        # Every request an engine served was one late first token there: 4 -> 3 -> 2, then no lower.
        served = {
            f"{namespace}/{leader}-rank-0": engines.engine(namespace, leader).received for leader in leaders
        }
        assert sum(served.values()) >= 12, served
        want = {endpoint: float({0: SLOTS, 1: SLOTS - 1}.get(n, FLOOR)) for endpoint, n in served.items()}
        assert seen == want, (served, picker.log()[-3000:])
        assert "adaptive batch limit" in picker.log()
    finally:
        for process in (envoy, picker):
            if process is not None:
                process.stop()
        real_cluster.kubelet.remove_listener(engines)
        engines.close()
        real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
