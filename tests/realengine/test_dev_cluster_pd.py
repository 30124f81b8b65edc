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

import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from ascend_fleet_dev.real.disaggregation import SOURCE_COMPUTED, SOURCE_TRANSFERRED, prompt_tokens_by_source
from ascend_fleet_dev.real.localpods import is_picker_pod
from ascend_fleet_dev.real.realengines import RealEngines
from tests.e2e.fleet import Fleet, without_warnings
from tests.support.documents import inference

from .server import http
from .support import routed_vllm_stack
from .test_disaggregated_vllm import complete, prompt, sidecar_or_skip

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


@dataclass
class PdFleet:
    fleet: Fleet
    engines: RealEngines
    gateway: str  # the pool's entry: Envoy in front of the picker

    def pods(self) -> dict[str, dict]:
        """The engine pods by role, as they are now."""
        return {
            p["metadata"]["labels"][names.LABEL_PD_ROLE]: p
            for p in self.fleet.pods(NAME)
            if not is_picker_pod(p) and not p["metadata"].get("deletionTimestamp")
        }

    def pid(self, pod: dict) -> int | None:
        engine = self.engines.engine(NAMESPACE, pod["metadata"]["name"])
        assert engine is not None, f"pod {pod['metadata']['name']} has no real engine"
        return engine.process.pid


@pytest.fixture(scope="module")
def pd_fleet() -> Iterator[PdFleet]:
    sidecar_or_skip()
    with routed_vllm_stack(NAMESPACE, limit=2) as (local, pickers):
        assert local.real_engines is not None
        fleet = Fleet(local.kube, NAMESPACE)
        doc = (
            inference(NAME, MODEL)
            .engine("vllm-ascend")
            .merge(disaggregation={"prefill": {"parallelism": {"tensor": 1}}, "decode": {}})
            .routing("inferencePool", picker={"replicas": 1})
            .build()
        )
        fleet.apply(doc)
        wait_for(lambda: both_roles_ready(fleet), 900, "a real prefill and a real decode engine ready")
        route = wait_for(lambda: pickers.route(NAMESPACE, NAME), 120, "the picker's route")
        yield PdFleet(fleet, local.real_engines, route.url)


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
    fleet, pods = pd_fleet.fleet, pd_fleet.pods()
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
    moved = routed_prompts(pd_fleet, pd_fleet.pods())
    print(f"through the gateway, {ROUTED} prompts: prompt tokens by source {moved}")


def routed_prompts(running: PdFleet, pods: dict[str, dict]) -> dict[str, dict[str, float]]:
    """``ROUTED`` fresh prompts through the gateway, each answered in full, computed whole by the prefill pod
    and loaded by the decode pod: what each engine counted meanwhile."""
    before = {role: counters(pod) for role, pod in pods.items()}
    answers = [complete(running.gateway, prompt(), tokens=4) for _ in range(ROUTED)]
    moved = moved_since(pods, before)
    assert all(len(a["choices"][0]["logprobs"]["tokens"]) == 4 for a in answers), answers
    # Each prompt was computed whole on the prefill engine, which loaded nothing...
    assert moved["prefill"][SOURCE_COMPUTED] > 200 * ROUTED, moved
    assert moved["prefill"][SOURCE_TRANSFERRED] == 0, moved
    # ...and the decode engine loaded whole blocks of each from the prefill engine's files.
    assert moved["decode"][SOURCE_TRANSFERRED] >= 256 * ROUTED, moved
    return moved


def test_a_prefill_pods_restart_leaves_its_decode_peer_serving_and_pairing_again(pd_fleet):
    """The prefill pod is deleted; the operator recreates it alone (a new engine, a new address) while the decode
    engine, the same process throughout, answers what comes meanwhile by computing prompts itself; once the new
    prefill pod is Ready, routed requests are again prefilled there and loaded by the decode engine."""
    pods = pd_fleet.pods()
    decode_pid, old_prefill = pd_fleet.pid(pods["decode"]), pods["prefill"]
    pd_fleet.fleet.kube.delete("Pod", NAMESPACE, old_prefill["metadata"]["name"])
    started = time.monotonic()

    def new_prefill() -> dict | None:
        found = pd_fleet.pods().get("prefill")
        if found is None or found["metadata"]["uid"] == old_prefill["metadata"]["uid"]:
            return None
        ready = {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}
        return found if ready.get("Ready") == "True" else None

    # Meanwhile the decode pod answers alone once the picker names no prefill pod (none serves). A request sent
    # while the picker still named the deleted pod may fail: the sidecar's prefill call finds no engine.
    refused: list[str] = []

    def answered_alone() -> dict | None:
        try:
            return complete(pd_fleet.gateway, prompt(), tokens=4)
        except urllib.error.HTTPError as error:
            refused.append(f"{error.code} after {time.monotonic() - started:.1f} s")
            return None

    alone = wait_for(answered_alone, 60, "an answer while no prefill pod serves", interval=1.0)
    assert len(alone["choices"][0]["logprobs"]["tokens"]) == 4, alone
    print(f"\nwhile no prefill pod served: answered; refused before that: {refused or 'none'}")
    prefill = wait_for(new_prefill, 600, "a new prefill pod Ready")
    print(f"a new prefill pod Ready {time.monotonic() - started:.0f} s after the old one's deletion")
    wait_for(lambda: both_roles_ready(pd_fleet.fleet), 120, "both roles ready again")
    pods = pd_fleet.pods()
    assert pods["prefill"]["metadata"]["uid"] == prefill["metadata"]["uid"]
    assert pd_fleet.pid(pods["decode"]) == decode_pid  # the decode engine never restarted
    # The picker has scraped the new pod once it serves: the first routed prompt may still come too soon.
    wait_for(lambda: paired_once(pd_fleet, pods), 120, "a prompt prefilled by the new pod", interval=2.0)
    moved = routed_prompts(pd_fleet, pods)
    print(f"after the prefill pod's restart, {ROUTED} prompts: prompt tokens by source {moved}")
    assert pd_fleet.pid(pods["decode"]) == decode_pid


def paired_once(running: PdFleet, pods: dict[str, dict]) -> bool:
    """Whether one fresh prompt through the gateway was computed by the prefill pod."""
    before = counters(pods["prefill"])
    complete(running.gateway, prompt(), tokens=1)
    return counters(pods["prefill"]).get(SOURCE_COMPUTED, 0) > before.get(SOURCE_COMPUTED, 0)
