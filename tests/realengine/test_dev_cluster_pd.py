"""A one-prefill, one-decode vllm-ascend fleet reconciled by the operator on the real control plane, its pods run
as real ``vllm serve`` processes (``engines="vllm"``, what ``ascend-fleet dev-cluster --real --engines vllm``
runs): the node agent translates each pod's rendered ``--kv-transfer-config`` (MooncakeConnectorV1, producer or
consumer) into vLLM's ExampleConnector in the same role over one shared directory. A prompt computed by the
prefill pod (one output token, what the P/D sidecar asks of it) is then loaded by the decode pod, which the
fleet's Service selects: vLLM's own counters say which engine computed the prompt and which received it.
Skipped without the control plane or ``make engine-vllm``; under ``CI=true`` that fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ascend_fleet.api import names
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import wait_for
from ascend_fleet_dev.real.disaggregation import SOURCE_COMPUTED, SOURCE_TRANSFERRED, prompt_tokens_by_source
from tests.e2e.conftest import fast_settings
from tests.e2e.fleet import Fleet, without_warnings
from tests.support.documents import inference

from .server import http
from .support import real_vllm_stack
from .test_disaggregated_vllm import complete, prompt

pytestmark = pytest.mark.timeout(1500)
NAMESPACE = "default"
NAME = "tiny-pd"
MODEL = "tiny"


def both_roles_ready(fleet: Fleet) -> dict | None:
    status = fleet.get(NAME).get("status") or {}
    roles = status.get("roles") or {}
    ready = all((roles.get(role) or {}).get("readyReplicas") == 1 for role in ("prefill", "decode"))
    return status if ready else None


@pytest.fixture(scope="module")
def pd_fleet() -> Iterator[tuple[Fleet, dict[str, dict]]]:
    with (
        real_vllm_stack(NAMESPACE, limit=2) as local,
        OperatorThread(OperatorContext(fast_settings(), local.kube), RunOptions()),
    ):
        fleet = Fleet(local.kube, NAMESPACE)
        doc = (
            inference(NAME, MODEL)
            .engine("vllm-ascend")
            .merge(disaggregation={"prefill": {"parallelism": {"tensor": 1}}, "decode": {}})
            .build()
        )
        fleet.apply(doc)
        wait_for(lambda: both_roles_ready(fleet), 900, "a real prefill and a real decode engine ready")
        pods = {p["metadata"]["labels"][names.LABEL_PD_ROLE]: p for p in fleet.pods(NAME)}
        yield fleet, pods


def counters(pod: dict) -> dict[str, float]:
    status, text = http("GET", f"http://{pod['status']['podIP']}:8000/metrics")
    assert status == 200
    return prompt_tokens_by_source(text)


def test_the_decode_pod_loads_what_the_prefill_pod_computed(pd_fleet):
    fleet, pods = pd_fleet
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
    after = {role: counters(pod) for role, pod in pods.items()}
    moved = {
        role: {
            k: after[role].get(k, 0) - before[role].get(k, 0) for k in (SOURCE_COMPUTED, SOURCE_TRANSFERRED)
        }
        for role in pods
    }
    print("prompt tokens by source:", moved)
    assert moved["prefill"][SOURCE_COMPUTED] > 200 and moved["prefill"][SOURCE_TRANSFERRED] == 0
    assert moved["decode"][SOURCE_TRANSFERRED] >= 256  # whole KV blocks from the prefill engine's files
    # The decode engine continues from the prefill engine's cache: its first token is the prefill engine's.
    assert first["choices"][0]["logprobs"]["tokens"][0] == second["choices"][0]["logprobs"]["tokens"][0]
