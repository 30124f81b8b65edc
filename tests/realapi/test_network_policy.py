"""The fleet's NetworkPolicy on the real API server: it is accepted as rendered, stored without drift, and its
selectors, evaluated by the API server itself (label-selector lists), pick exactly the pods they name: a fleet's
own engine pods and its picker, the gateway's and Prometheus's pods, never another fleet's pods."""

from __future__ import annotations

import uuid

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.settings import NetworkPolicySettings
from ascend_fleet.reconcile.drift import drifted
from ascend_fleet.render import render_all, validate
from tests.support.documents import inference

pytestmark = pytest.mark.e2e


def selector(labels: dict) -> dict[str, str]:
    """matchLabels of a label selector ({} selects everything)."""
    assert set(labels) <= {"matchLabels"}, "the operator writes matchLabels only"
    return labels.get("matchLabels", {})


def stand_in(namespace: str, name: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


@pytest.fixture
def namespaces(real_cluster):
    suffix = uuid.uuid4().hex[:6]
    tag = {"np-test": suffix}
    made = {
        role: real_cluster.create_namespace(f"np-{role}-{suffix}", labels={**tag, "np-role": role})
        for role in ("fleets", "gateway", "monitoring", "stranger")
    }
    yield made, tag
    for name in made.values():
        real_cluster.kube.delete_namespace(name)


def engine_pods(kube, namespace: str, name: str) -> set[str]:
    pods = kube.list("Pod", namespace, {names.LABEL_NAME: name, names.LABEL_APP_COMPONENT: "engine"})
    return {p["metadata"]["name"] for p in pods}


def pods_matching(kube, peer: dict, home: str) -> set[tuple[str, str]]:
    """(namespace, pod) of every pod a NetworkPolicy peer admits, as the API server selects them."""
    if "namespaceSelector" in peer:
        spaces = [
            n["metadata"]["name"] for n in kube.list("Namespace", None, selector(peer["namespaceSelector"]))
        ]
    else:  # a podSelector alone: the policy's own namespace
        spaces = [home]
    return {
        (space, pod["metadata"]["name"])
        for space in spaces
        for pod in kube.list("Pod", space, selector(peer.get("podSelector", {})))
    }


def test_policies_are_accepted_and_select_exactly_their_fleets_pods(real_cluster, namespaces):
    made, tag = namespaces
    kube, home = real_cluster.kube, made["fleets"]
    settings = NetworkPolicySettings.model_validate(
        {
            "gateway": {"namespaceLabels": {**tag, "np-role": "gateway"}, "podLabels": {"app": "proxy"}},
            "prometheus": {"namespaceLabels": {**tag, "np-role": "monitoring"}, "podLabels": {"app": "prom"}},
        }
    )
    policies = {}
    for name, spec in (
        ("alpha", {"parallelism": {"tensor": 8, "pipeline": 2}}),
        ("beta", {"routing": {"mode": "inferencePool"}}),
    ):
        doc = inference(name).namespace(home).engine("vllm-ascend", image="engine:v1").spec(**spec).build()
        for obj in render_all(validate(doc).obj, network=settings):
            if obj["kind"] == "Pod":
                assert kube.create(obj, exist_ok=False, strict=True) is not None
            elif obj["kind"] == "NetworkPolicy":
                stored = kube.create(obj, exist_ok=False, strict=True)
                assert stored is not None
                assert not drifted(obj, stored), (
                    "the server changed the policy: the operator would patch forever"
                )
                policies[name] = obj
            elif obj["kind"] == "Deployment":  # the picker: one pod with its template's labels
                labels = obj["spec"]["template"]["metadata"]["labels"]
                kube.create(stand_in(home, f"{name}-picker", labels), exist_ok=False)
    kube.create(stand_in(made["gateway"], "proxy", {"app": "proxy"}), exist_ok=False)
    kube.create(stand_in(made["monitoring"], "prom", {"app": "prom"}), exist_ok=False)
    # A stranger with every label it could copy, but in its own namespace; and one in the fleets' namespace.
    kube.create(stand_in(made["stranger"], "proxy", {"app": "proxy"}), exist_ok=False)
    kube.create(stand_in(home, "curious", {"app": "proxy"}), exist_ok=False)

    alpha, beta = engine_pods(kube, home, "alpha"), engine_pods(kube, home, "beta")
    assert len(alpha) == 2 and len(beta) == 1
    for name, own in (("alpha", alpha), ("beta", beta)):
        spec = policies[name]["spec"]
        guarded = {p for _, p in pods_matching(kube, {"podSelector": spec["podSelector"]}, home)}
        assert guarded == own
        gang, serving, scrape = spec["ingress"]
        assert "ports" not in gang
        assert {p for _, p in pods_matching(kube, gang["from"][0], home)} == own
        picker, gateway = serving["from"]
        # alpha serves in mode service: it has no picker, and beta's picker is not alpha's
        assert pods_matching(kube, picker, home) == ({(home, "beta-picker")} if name == "beta" else set())
        assert pods_matching(kube, gateway, home) == {(made["gateway"], "proxy")}
        assert pods_matching(kube, scrape["from"][0], home) == {(made["monitoring"], "prom")}
