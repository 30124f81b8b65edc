"""Prefill/decode scheduling through a real data plane: Envoy and the endpoint picker built from tools/epp (the
upstream picker plus the project's P/D plugins, tools/epp/disaggregation) in front of simulated engines.

Of a pool of two pods, one is labelled prefill and one decode. With a P/D configuration the picker sends every
request to the decode pod and names the prefill pod in ``x-prefiller-host-port``, the header the decode pod's
sidecar reads; Envoy echoes that header back as the engine received it, so the test reads what the picker told
the engine, not what the picker says it did. The same pool with the picker's usual single profile is the
control: requests spread over both pods and carry no such header. The same chain with llm-d's sidecar and real
engines behind the picker is tests/realengine/test_disaggregated_routed.py.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.kube import scaled, wait_for
from ascend_fleet.render import Owner, render_all, validate
from ascend_fleet.render.picker_config import pd_scheduling, picker_config
from ascend_fleet.render.routing import picker_args, picker_name
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.dataplane import Envoy, Picker, free_port
from ascend_fleet_dev.real.disaggregation import PREFILL_HEADER
from ascend_fleet_dev.real.poolendpoints import PoolRef
from tests.routing.test_dataplane import binaries, pool_namespace, session  # noqa: F401 (binaries: a fixture)
from tests.support.documents import inference as inference_document

pytestmark = pytest.mark.e2e
NAME = "llm"
# The role label llm-d's picker reads (and the operator writes on two-role fleets), and its values.
ROLE_LABEL = names.LABEL_LLMD_ROLE
ROLES = ("prefill", "decode")
REQUESTS = 40


def inference(namespace: str) -> AscendInference:
    doc = (
        inference_document(NAME, "qwen")
        .namespace(namespace)
        .uid("u-pd")
        .engine("vllm-ascend")
        .parallelism(data=2)
        .section("batching", maxBatchSize=4)
        .routing("inferencePool")
        .build()
    )
    return validate(doc).obj


class Plane:
    def __init__(self, real_cluster, engines, namespace, binary, kubeconfig, obj, pods):
        self.real_cluster, self.engines, self.namespace = real_cluster, engines, namespace
        self.binary, self.kubeconfig, self.obj, self.pods = binary, kubeconfig, obj, pods

    def received(self) -> dict[str, int]:
        return {role: self.engines.engine(self.namespace, pod).received for role, pod in self.pods.items()}

    def address(self, role: str) -> str:
        found = self.engines.api_endpoint(self.namespace, self.pods[role])
        assert found is not None
        return found

    def start(self, config: dict) -> tuple[Picker, Envoy]:
        args = picker_args(
            Owner.of(self.obj), grpc_port=free_port(), health_port=free_port(), metrics_port=free_port()
        )
        picker = Picker(args, config, self.kubeconfig, binary=self.binary).start(timeout=scaled(60.0))
        envoy = Envoy(
            picker_port=picker.grpc_port,
            pool=PoolRef(self.real_cluster.kube, self.namespace, NAME),
            echoed=[PREFILL_HEADER],
        )
        envoy.start(timeout=scaled(60.0))
        return picker, envoy


@pytest.fixture(scope="module")
def plane(real_cluster, binaries, tmp_path_factory):  # noqa: F811 (binaries is the imported fixture)
    namespace = pool_namespace(real_cluster, "pd")
    engines = SimulatedEngines(Scenario.constant(0.0))
    real_cluster.kubelet.add_listener(engines)
    try:
        obj = inference(namespace)
        objects = render_all(obj)
        pods = {}
        for o in objects:
            o["metadata"].pop("ownerReferences", None)
            if o["kind"] == "Pod":  # replica 0 prefills, replica 1 decodes
                role = ROLES[len(pods)]
                o["metadata"]["labels"][ROLE_LABEL] = role
                pods[role] = o["metadata"]["name"]
        real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        wait_for(
            lambda: all(engines.api_endpoint(namespace, n) for n in pods.values()), 60, "serving engines"
        )
        token = real_cluster.kubectl("create", "token", picker_name(NAME), "-n", namespace).stdout.strip()
        kubeconfig = real_cluster.cluster.control_plane.write_kubeconfig(
            tmp_path_factory.mktemp("epp") / "kubeconfig", token=token, namespace=namespace
        )
        yield Plane(real_cluster, engines, namespace, binaries[0], kubeconfig, obj, pods)
    finally:
        real_cluster.kubelet.remove_listener(engines)
        engines.close()
        real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def send(url: str, count: int, headers: dict[str, str] | None = None) -> list[tuple[int, str | None]]:
    """(status, the prefill header the engine received) of ``count`` completions, eight at a time."""
    gate = asyncio.Semaphore(8)

    async def one(client) -> tuple[int, str | None]:
        async with gate:
            body = {"model": "qwen", "prompt": f"{uuid.uuid4().hex} hello", "max_tokens": 2}
            async with client.post(url + "/v1/completions", json=body, headers=headers or {}) as response:
                await response.read()
                return response.status, response.headers.get(PREFILL_HEADER)

    async with session() as client:
        return await asyncio.gather(*(one(client) for _ in range(count)))


def routed(plane: Plane, envoy: Envoy, headers: dict[str, str] | None = None):
    before = plane.received()
    results = asyncio.run(send(envoy.url, REQUESTS, headers))
    after = plane.received()
    return results, {role: after[role] - before[role] for role in ROLES}


def warm(envoy: Envoy) -> None:
    wait_for(
        lambda: asyncio.run(send(envoy.url, 1))[0][0] == 200, 90, "an answer through the picker", interval=0.5
    )


def test_every_request_decodes_on_the_decode_pod_and_names_the_prefill_pod(plane):
    picker, envoy = plane.start(pd_scheduling(picker_config(plane.obj.spec)))
    try:
        warm(envoy)
        prefill = plane.address("prefill")
        # A client's own header is replaced: only the picker names the prefill pod.
        for headers in (None, {PREFILL_HEADER: "198.51.100.7:8000"}):
            results, received = routed(plane, envoy, headers)
            print(f"\nP/D picker ({headers}): received {received}, headers {set(h for _, h in results)}")
            assert [s for s, _ in results].count(200) == REQUESTS, picker.log()[-3000:]
            assert received == {"prefill": 0, "decode": REQUESTS}
            assert {h for _, h in results} == {prefill}

        # The prefill pod gone from its role: requests still decode, and no prefill pod is named, not even the
        # client's (Envoy leaves out a header echoed empty).
        plane.real_cluster.kubectl(
            "label", "pod", plane.pods["prefill"], f"{ROLE_LABEL}=none", "--overwrite", "-n", plane.namespace
        )

        def unnamed() -> bool:
            return {h for _, h in asyncio.run(send(envoy.url, 4, forged))} == {None}

        forged = {PREFILL_HEADER: "198.51.100.7:8000"}
        wait_for(unnamed, 30, "the picker to see the prefill pod leave its role", interval=0.5)
        results, received = routed(plane, envoy, forged)
        assert [s for s, _ in results].count(200) == REQUESTS and received["decode"] == REQUESTS
        assert {h for _, h in results} == {None}
    finally:
        envoy.stop()
        picker.stop()
        plane.real_cluster.kubectl(
            "label",
            "pod",
            plane.pods["prefill"],
            f"{ROLE_LABEL}=prefill",
            "--overwrite",
            "-n",
            plane.namespace,
        )


def test_the_usual_picker_spreads_requests_over_both_pods_and_names_no_prefill_pod(plane):
    picker, envoy = plane.start(picker_config(plane.obj.spec))
    try:
        warm(envoy)
        results, received = routed(plane, envoy)
        print(f"\nusual picker: received {received}, headers {set(h for _, h in results)}")
        assert [s for s, _ in results].count(200) == REQUESTS
        assert received["prefill"] > 0 and received["decode"] > 0
        assert {h for _, h in results} == {None}
    finally:
        envoy.stop()
        picker.stop()
