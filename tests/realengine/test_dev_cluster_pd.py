"""A routed one-prefill, one-decode vllm-ascend fleet reconciled by the operator on the real control plane, its
pods run as ``ascend-fleet dev-cluster --real --engines vllm`` runs them (``engines="vllm"``): each engine
container as a real ``vllm serve`` whose rendered ``--kv-transfer-config`` (MooncakeConnectorV1, producer or
consumer) the node agent translates into vLLM's ExampleConnector in the same role over one shared directory,
the decode pod's ``pd-sidecar`` container as llm-d's sidecar, and the picker pods (the project's picker with
its P/D profiles) with their gateway.

Two tests: a prompt computed by the prefill pod (one output token, what the sidecar asks of it) is then loaded
by the decode pod, which the fleet's Service selects; and plain requests through the gateway, nothing in them
naming a pod, are computed by the prefill engine and loaded by the decode engine. vLLM's own counters say which
engine computed a prompt and which received it. Skipped without the control plane, the picker, the sidecar or
``make engine-vllm``; under ``CI=true`` that fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ascend_fleet.api import names
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import wait_for
from ascend_fleet_dev.real.disaggregation import SOURCE_COMPUTED, SOURCE_TRANSFERRED, prompt_tokens_by_source
from ascend_fleet_dev.real.localpods import LocalPods, install_inference_extension, is_picker_pod
from tests.e2e.conftest import fast_settings
from tests.e2e.fleet import Fleet, without_warnings
from tests.support.documents import inference

from .server import http
from .support import real_vllm_stack
from .test_disaggregated_vllm import complete, prompt, sidecar_or_skip
from .test_routed_vllm import picker_or_skip

pytestmark = pytest.mark.timeout(1500)
NAMESPACE = "default"
NAME = "tiny-pd"
MODEL = "tiny"
ROUTED = 3  # requests through the gateway


def both_roles_ready(fleet: Fleet) -> dict | None:
    status = fleet.get(NAME).get("status") or {}
    roles = status.get("roles") or {}
    ready = all((roles.get(role) or {}).get("readyReplicas") == 1 for role in ("prefill", "decode"))
    return status if ready else None


@pytest.fixture(scope="module")
def pd_fleet() -> Iterator[tuple[Fleet, dict[str, dict], str]]:
    """The fleet, its engine pods by role and the gateway's URL."""
    picker_or_skip()
    sidecar_or_skip()
    with real_vllm_stack(NAMESPACE, limit=2) as local:
        install_inference_extension(local.kube)
        with (
            LocalPods(local.kube, local.cluster.control_plane) as pickers,
            OperatorThread(OperatorContext(fast_settings(), local.kube), RunOptions()),
        ):
            local.cluster.kubelet.add_listener(pickers)
            try:
                fleet = Fleet(local.kube, NAMESPACE)
                doc = (
                    inference(NAME, MODEL)
                    .engine("vllm-ascend")
                    .merge(disaggregation={"prefill": {"parallelism": {"tensor": 1}}, "decode": {}})
                    .routing("inferencePool", picker={"replicas": 1})
                    .build()
                )
                fleet.apply(doc)
                wait_for(
                    lambda: both_roles_ready(fleet), 900, "a real prefill and a real decode engine ready"
                )
                route = wait_for(lambda: pickers.route(NAMESPACE, NAME), 120, "the picker's route")
                pods = {
                    p["metadata"]["labels"][names.LABEL_PD_ROLE]: p
                    for p in fleet.pods(NAME)
                    if not is_picker_pod(p)
                }
                yield fleet, pods, route.url
            finally:
                local.cluster.kubelet.remove_listener(pickers)


def counters(pod: dict) -> dict[str, float]:
    """vLLM's prompt tokens by source, from the engine's own ``/metrics`` (the decode pod's through its
    sidecar, which hands every other path to its engine)."""
    status, text = http("GET", f"http://{pod['status']['podIP']}:8000/metrics")
    assert status == 200
    return prompt_tokens_by_source(text)


def moved_since(pods: dict[str, dict], before: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    after = {role: counters(pod) for role, pod in pods.items()}
    return {
        role: {
            k: after[role].get(k, 0) - before[role].get(k, 0) for k in (SOURCE_COMPUTED, SOURCE_TRANSFERRED)
        }
        for role in pods
    }


def test_the_decode_pod_loads_what_the_prefill_pod_computed(pd_fleet):
    fleet, pods, _ = pd_fleet
    status = fleet.get(NAME)["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], without_warnings(ready["message"])) == (
        "True",
        "2 of 2 replicas ready (prefill 1 of 1, decode 1 of 1)",
    )
    service = fleet.kube.get("Service", NAMESPACE, NAME)
    (selected,) = fleet.kube.list("Pod", NAMESPACE, service["spec"]["selector"])
    assert selected["metadata"]["name"] == pods["decode"]["metadata"]["name"]

    before = {role: counters(pod) for role, pod in pods.items()}
    text = prompt()
    url = {role: f"http://{pod['status']['podIP']}:8000" for role, pod in pods.items()}
    first = complete(url["prefill"], text, tokens=1)
    second = complete(url["decode"], text, tokens=4)
    moved = moved_since(pods, before)
    print("prompt tokens by source:", moved)
    assert moved["prefill"][SOURCE_COMPUTED] > 200 and moved["prefill"][SOURCE_TRANSFERRED] == 0
    assert moved["decode"][SOURCE_TRANSFERRED] >= 256  # whole KV blocks from the prefill engine's files
    # The decode engine continues from the prefill engine's cache: its first token is the prefill engine's.
    assert first["choices"][0]["logprobs"]["tokens"][0] == second["choices"][0]["logprobs"]["tokens"][0]


def test_requests_through_the_gateway_are_prefilled_by_one_pod_and_decoded_by_the_other(pd_fleet):
    """The picker sends each request to the decode pod and names the prefill pod; the decode pod's sidecar has
    the prefill engine compute the prompt, then its engine loads that cache. The client names no pod."""
    _, pods, gateway = pd_fleet
    before = {role: counters(pod) for role, pod in pods.items()}
    prompts = [prompt() for _ in range(ROUTED)]
    answers = [complete(gateway, text, tokens=4) for text in prompts]
    moved = moved_since(pods, before)
    print(f"through the gateway, {ROUTED} prompts: prompt tokens by source {moved}")
    assert all(len(a["choices"][0]["logprobs"]["tokens"]) == 4 for a in answers), answers
    # Each prompt was computed whole on the prefill engine, which loaded nothing...
    assert moved["prefill"][SOURCE_COMPUTED] > 200 * ROUTED and moved["prefill"][SOURCE_TRANSFERRED] == 0, (
        moved
    )
    # ...and the decode engine loaded whole blocks of each from the prefill engine's files.
    assert moved["decode"][SOURCE_TRANSFERRED] >= 256 * ROUTED, moved
