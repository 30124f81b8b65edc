"""Precision variants through a real data plane: Envoy, the endpoint picker built from tools/epp (the upstream
picker plus the project's variant filter), the upstream InferenceModelRewrite, and simulated engines that, like
vLLM, answer 404 for a model name they do not serve.

Replica 0 serves ``qwen-fp16`` and replica 1 ``qwen-int8``; clients send ``qwen``. The picker draws each
request's name by the rewrite's weights and the filter keeps it on the pods of that variant. The same pool with
the filter left out of the picker's configuration (what the upstream picker alone does) is measured too, to show
that the filter is what keeps requests off the wrong variant.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.kube import scaled, wait_for
from ascend_fleet.render import Owner, render_all, validate
from ascend_fleet.render.picker_config import VARIANT_FILTER, picker_config
from ascend_fleet.render.routing import picker_args, picker_name
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.dataplane import Envoy, Picker, free_port
from ascend_fleet_dev.real.poolendpoints import PoolRef
from tests.routing.test_dataplane import binaries, pool_namespace, session  # noqa: F401 (binaries: a fixture)
from tests.support.documents import inference as inference_document

pytestmark = pytest.mark.e2e
NAME = "llm"
VARIANTS = [{"name": "fp16", "precision": "fp16"}, {"name": "int8", "precision": "int8"}]
REQUESTS = 200


def inference(namespace: str, weights: dict[str, int]) -> AscendInference:
    doc = (
        inference_document(NAME, "qwen")
        .namespace(namespace)
        .uid("u-variants")
        .engine("vllm-ascend")
        .parallelism(data=2)
        .section("batching", maxBatchSize=4)
        .routing("inferencePool")
        .spec(variants=VARIANTS)
        .build()
    )
    doc["metadata"]["annotations"] = {names.ANNOTATION_TRAFFIC: json.dumps(weights)}
    return validate(doc).obj


def rewrite(obj: AscendInference) -> dict:
    (found,) = [o for o in render_all(obj) if o["kind"] == "InferenceModelRewrite"]
    found["metadata"].pop("ownerReferences", None)  # applied by hand here, with no owner object
    return found


class Plane:
    def __init__(self, real_cluster, engines, namespace, binary, kubeconfig, obj, leaders):
        self.real_cluster, self.engines, self.namespace = real_cluster, engines, namespace
        self.binary, self.kubeconfig, self.obj, self.leaders = binary, kubeconfig, obj, leaders

    def received(self) -> list[int]:
        return [self.engines.engine(self.namespace, name).received for name in self.leaders]

    def start(self, config: dict) -> tuple[Picker, Envoy]:
        args = picker_args(
            Owner.of(self.obj), grpc_port=free_port(), health_port=free_port(), metrics_port=free_port()
        )
        picker = Picker(args, config, self.kubeconfig, binary=self.binary).start(timeout=scaled(60.0))
        envoy = Envoy(
            picker_port=picker.grpc_port, pool=PoolRef(self.real_cluster.kube, self.namespace, NAME)
        )
        envoy.start(timeout=scaled(60.0))
        return picker, envoy


@pytest.fixture(scope="module")
def plane(real_cluster, binaries, tmp_path_factory):  # noqa: F811 (binaries is the imported fixture)
    namespace = pool_namespace(real_cluster, "variants")
    engines = SimulatedEngines(Scenario.constant(0.0))
    real_cluster.kubelet.add_listener(engines)
    try:
        obj = inference(namespace, {"fp16": 75, "int8": 25})
        objects = render_all(obj)
        for o in objects:
            o["metadata"].pop("ownerReferences", None)
        real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        leaders = [o["metadata"]["name"] for o in objects if o["kind"] == "Pod"]
        wait_for(lambda: all(engines.api_endpoint(namespace, n) for n in leaders), 60, "serving engines")
        token = real_cluster.kubectl("create", "token", picker_name(NAME), "-n", namespace).stdout.strip()
        kubeconfig = real_cluster.cluster.control_plane.write_kubeconfig(
            tmp_path_factory.mktemp("epp") / "kubeconfig", token=token, namespace=namespace
        )
        yield Plane(real_cluster, engines, namespace, binaries[0], kubeconfig, obj, leaders)
    finally:
        real_cluster.kubelet.remove_listener(engines)
        engines.close()
        real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def send(url: str, count: int) -> list[tuple[int, str]]:
    """(status, model in the answer) of ``count`` completions for the base name, eight at a time."""
    gate = asyncio.Semaphore(8)

    async def one(client) -> tuple[int, str]:
        async with gate:
            body = {"model": "qwen", "prompt": f"{uuid.uuid4().hex} hello", "max_tokens": 2}
            async with client.post(url + "/v1/completions", json=body) as response:
                answer = await response.json(content_type=None)
                return response.status, (answer or {}).get("model", "")

    async with session() as client:
        return await asyncio.gather(*(one(client) for _ in range(count)))


def routed(plane: Plane, envoy: Envoy, count: int = REQUESTS) -> tuple[list[tuple[int, str]], list[int]]:
    before = plane.received()
    results = asyncio.run(send(envoy.url, count))
    return results, [a - b for a, b in zip(plane.received(), before, strict=True)]


def warm(envoy: Envoy) -> None:
    wait_for(
        lambda: asyncio.run(send(envoy.url, 1))[0][0] == 200, 90, "an answer through the picker", interval=0.5
    )


def test_the_rewrite_splits_by_weight_and_the_filter_keeps_each_request_on_its_variant(plane):
    config = picker_config(plane.obj.spec)
    assert any(p["type"] == VARIANT_FILTER for p in config["plugins"])
    picker, envoy = plane.start(config)
    try:
        warm(envoy)
        results, received = routed(plane, envoy)
        assert [s for s, _ in results].count(200) == REQUESTS, picker.log()[-3000:]
        # The picker answers in the client's name; the engines saw their own.
        assert {m for _, m in results} == {"qwen"}
        fp16, int8 = received
        print(f"\n75/25 split with the variant filter: fp16 {fp16}, int8 {int8} of {REQUESTS}, 0 failed")
        assert fp16 + int8 == REQUESTS and 0.15 * REQUESTS <= int8 <= 0.35 * REQUESTS

        # What a shift writes reaches the picker through the rewrite alone: all to int8 now.
        moved = inference(plane.namespace, {"fp16": 0, "int8": 100})
        plane.real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(rewrite(moved)))

        def all_int8() -> bool:
            _, got = routed(plane, envoy, 10)
            return got == [0, 10]

        wait_for(all_int8, 30, "the picker to follow the rewrite", interval=0.5)
        results, received = routed(plane, envoy)
        assert [s for s, _ in results].count(200) == REQUESTS and received == [0, REQUESTS]
    finally:
        envoy.stop()
        picker.stop()
        back = inference(plane.namespace, {"fp16": 75, "int8": 25})
        plane.real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(rewrite(back)))


def test_without_the_filter_the_upstream_picker_sends_rewritten_requests_to_the_wrong_variant(plane):
    config = picker_config(plane.obj.spec)
    config["plugins"] = [p for p in config["plugins"] if p["type"] != VARIANT_FILTER]
    profile = config["schedulingProfiles"][0]
    profile["plugins"] = [p for p in profile["plugins"] if p["pluginRef"] != VARIANT_FILTER]
    picker, envoy = plane.start(config)
    try:
        wait_for(
            lambda: 200 in [s for s, _ in asyncio.run(send(envoy.url, 4))], 90, "an answer", interval=0.5
        )
        results, _ = routed(plane, envoy)
        wrong = [s for s, _ in results].count(404)
        print(
            f"\n75/25 split without the variant filter: {wrong} of {REQUESTS} answered 404 by the other variant"
        )
        # The rewrite still draws a name, but the picker chooses among both pods: some land on the wrong one.
        assert wrong > 0.1 * REQUESTS
    finally:
        envoy.stop()
        picker.stop()
