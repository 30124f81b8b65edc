"""The chart's ClusterRole grants exactly what the operator uses, in the default install.

Every request kopf and the operator's client sent during the reconciler and control-loop suites is
recorded as (API group, resource, verb): on the real control plane from the API server's audit log (the
operator runs there as the chart's ServiceAccount, so the real authorizer has already refused anything not
granted), on the emulator from its request log. The rendered ClusterRole must allow each of them and grant
nothing else, bar the few uses these suites cannot reach, each listed below with its reason.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.rbac import OBSERVED, SUITES, audited_requests
from tests.support.realcluster import STARTED

OPERATOR_USER = "system:serviceaccount:ascend-system:ascend-fleet"

EVERY_SUITE = {"e2e", "control"}

pytestmark = [pytest.mark.e2e, pytest.mark.after_all]

# Granted, though the local suites cannot show the operator using them.
NOT_EXERCISED: set[tuple[str, str, str]] = {
    # Read after a PDB create answers AlreadyExists (a foreign PDB holding the name); the suites exercise
    # the same path with a Service and a pod.
    ("policy", "poddisruptionbudgets", "get"),
    # Not a request: the admission plugin checks it when a child names its owner with blockOwnerDeletion.
    ("inference.ascendfleet.io", "ascendinferences/finalizers", "update"),
    # Never requested by the operator: held so that it may create the endpoint picker's Role, which grants them
    # (the API server refuses a Role granting more than its creator holds; tests/e2e/test_routing.py shows the
    # Role accepted). The operator lists InferencePools and InferenceObjectives per pass instead of watching.
    ("inference.networking.k8s.io", "inferencepools", "watch"),
    ("inference.networking.x-k8s.io", "inferenceobjectives", "watch"),
    ("inference.networking.x-k8s.io", "inferencemodelrewrites", "get"),
    ("inference.networking.x-k8s.io", "inferencemodelrewrites", "list"),
    ("inference.networking.x-k8s.io", "inferencemodelrewrites", "watch"),
    # The fleet's NetworkPolicy: read after a create answered AlreadyExists (as the PDB above), deleted only when
    # config.networkPolicy.enabled is turned off (tests/unit/test_network_policy.py plans it). Its patch-back is
    # exercised by tests/e2e/test_network_policy.py.
    ("networking.k8s.io", "networkpolicies", "get"),
    ("networking.k8s.io", "networkpolicies", "delete"),
    # The picker's leader Lease (spec.routing.picker.replicas above 1), granted by its Role in the same way.
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
}


def granted(cluster_role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in cluster_role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


@pytest.fixture(scope="module")
def cluster_role(tmp_path_factory):
    from ascend_fleet.kube import Kube
    from ascend_fleet_dev.cluster import DevCluster
    from ascend_fleet_dev.testing import api_client
    from tests.chart.helm import install

    with DevCluster() as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path_factory.mktemp("rbac") / "kubeconfig")
        namespace = f"rbac-{uuid.uuid4().hex[:6]}"
        Kube(api_client(cluster.url)).create_namespace(namespace)
        release = install(kubeconfig, "ascend-fleet", namespace)
    (role,) = [o for o in release.objects if o["kind"] == "ClusterRole"]
    return role


def observed() -> set[tuple[str, str, str]]:
    """What the operator was seen to ask for, on every API of this session."""
    found = set(OBSERVED)
    for handle in STARTED:
        found |= audited_requests(handle.cluster.control_plane.audit_log, OPERATOR_USER)
    return found


# A namespaced operator (tests/control runs one) lists and watches namespaces; the chart grants that in
# namespaced mode only (test_namespaced_rbac in tests/chart checks it), so the cluster-wide role is not asked for it.
NAMESPACED_ONLY = {("", "namespaces", "list"), ("", "namespaces", "watch")}
# The node Leases (node failover) are listed in kube-node-lease only, under the chart's Role there (tests/chart
# checks that Role), not under the ClusterRole.
NODE_LEASES = {("coordination.k8s.io", "leases", "list")}


def test_cluster_role_covers_every_request_the_operator_made(cluster_role):
    if not observed():
        pytest.skip("nothing recorded: run together with tests/e2e and tests/control (as make test does)")
    missing = sorted(observed() - NAMESPACED_ONLY - NODE_LEASES - granted(cluster_role))
    assert not missing, f"the operator used these without a grant: {missing}"


def test_cluster_role_grants_nothing_the_operator_never_used(cluster_role):
    if EVERY_SUITE - SUITES:
        pytest.skip(
            f"needs what {sorted(EVERY_SUITE - SUITES)} record: run the whole suite (as make test does)"
        )
    unused = sorted(granted(cluster_role) - observed() - NOT_EXERCISED)
    assert not unused, f"granted but never used: {unused}"
