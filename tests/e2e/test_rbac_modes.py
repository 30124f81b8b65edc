"""The chart's least-privilege modes on the real control plane: what the operator asks for, it was granted.

The chart is installed namespaced (operator.watchNamespaces), with and without rbac.routing, and its operator
pod runs as the chart's ServiceAccount against the real authorizer. From the API server's audit log: every
request the operator made is allowed by the Role and ClusterRole the chart rendered, none was refused, and
without rbac.routing the operator never touched a routing kind and reports why a routing spec is not served.
(Cluster-wide mode is tests/e2e/test_rbac.py, over the whole suite.)
"""

from __future__ import annotations

import uuid

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.localpods import LocalPods, operator_container
from tests.chart import helm
from tests.e2e.fleet import example
from tests.support.rbac import audit_events

pytestmark = pytest.mark.e2e
ROUTING_GROUPS = {"inference.networking.k8s.io", "inference.networking.x-k8s.io", "gateway.networking.k8s.io"}


@pytest.fixture
def real(cluster):
    if cluster is None or hasattr(cluster, "emulator"):
        pytest.skip(
            "runs the chart's Deployment against the real authorizer, which needs the real control plane"
        )
    return cluster


def granted(objects: list[dict], namespace: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the rendered ClusterRole, the Role in ``namespace`` and the node-Lease Role
    (``list`` in kube-node-lease, for node failover) allow."""
    roles = [o for o in objects if o["kind"] == "ClusterRole"] + [
        o
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["namespace"] in (namespace, "kube-node-lease")
    ]
    return {
        (group, resource, verb)
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def requests_of(audit_log, username: str) -> list[tuple[str, str, str, int]]:
    """(group, resource, verb, HTTP status) of every request ``username`` made."""
    found = []
    for event in audit_events(audit_log):
        ref = event.get("objectRef") or {}
        if (event.get("user") or {}).get("username") != username or not ref.get("resource"):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        status = (event.get("responseStatus") or {}).get("code", 0)
        found.append((ref.get("apiGroup", ""), resource, event["verb"], status))
    return found


@pytest.mark.parametrize("routing", [True, False], ids=["namespaced", "namespaced-without-routing"])
def test_namespaced_operator_uses_only_what_the_chart_granted(real, kube, namespace, routing):
    release = f"rb-{uuid.uuid4().hex[:6]}"
    home = f"{release}-system"
    kube.create_namespace(home)
    engines = SimulatedEngines(Scenario.constant(0.0))
    local = LocalPods(kube, real.cluster.control_plane, pickers=False)
    real.kubelet.add_listener(engines)
    real.kubelet.add_listener(local)
    values = {"operator": {"watchNamespaces": [namespace]}, "rbac": {"routing": routing}}
    try:
        installed = helm.install(real.kubeconfig, release, home, values, driver="secret")
        (account,) = [o["metadata"]["name"] for o in installed.objects if o["kind"] == "ServiceAccount"]
        pod = wait_for(
            lambda: next((p for p in kube.list("Pod", home) if operator_container(p)), None),
            60,
            "the chart's operator pod",
        )
        wait_for(
            lambda: (home, pod["metadata"]["name"]) in local.running(), 90, f"the operator ({local.failures})"
        )
        # Without routing the fleet asks for it anyway: the engines must still come up, with a sentence.
        doc = example(
            "sglang-small.yaml", rules=[], **({} if routing else {"routing": {"mode": "inferencePool"}})
        )
        doc["metadata"]["namespace"] = namespace
        kube.create(doc)
        name = doc["metadata"]["name"]
        wait_for(
            lambda: (kube.get(names.KIND, namespace, name).get("status") or {}).get("readyReplicas") == 1,
            120,
            "the fleet reconciled by the operator pod",
        )
        if not routing:
            ready = wait_for(
                lambda: next(
                    (
                        c
                        for c in (kube.get(names.KIND, namespace, name).get("status") or {}).get(
                            "conditions", []
                        )
                        if c["type"] == "Ready" and c["reason"] == "RoutingUnavailable"
                    ),
                    None,
                ),
                60,
                "Ready=False, RoutingUnavailable",
            )
            assert "routing.enabled: false (the chart's rbac.routing: false)" in ready["message"]
        made = requests_of(real.cluster.control_plane.audit_log, f"system:serviceaccount:{home}:{account}")
        assert made, "the audit log shows no request of the operator's ServiceAccount"
        refused = sorted({m for m in made if m[3] == 403})
        assert not refused, f"the API server refused the operator: {refused}"
        allowed = granted(installed.objects, namespace)
        beyond = sorted({m[:3] for m in made} - allowed)
        assert not beyond, f"used without a grant: {beyond}"
        if not routing:
            touched = sorted({m[:3] for m in made if m[0] in ROUTING_GROUPS})
            assert not touched, f"routing kinds used without rbac.routing: {touched}"
            assert not {group for group, _, _ in allowed} & ROUTING_GROUPS
    finally:
        real.kubelet.remove_listener(local)
        real.kubelet.remove_listener(engines)
        local.close()
        engines.close()
        kube.delete_namespace(home)
