"""A node dies under a dual-active inference: the other replica keeps serving, and the dead node's pod leaves it.

The test runs on a control plane of its own, whose controller manager calls a silent node dead after GRACE
seconds (the session's cluster waits 90 s, to ride out its API outage tests). The node's death is a power cut
of the node agent: no heartbeats, no status writes, no engine; the rest is the real controllers' doing.
"""

from __future__ import annotations

import pytest

from ascend_fleet.kube import NotFound, wait_for
from ascend_fleet.reconcile.timing import NODE_LEASE_STALE_SECONDS
from ascend_fleet_dev.real.nodefailure import kill_serving_node, serving_leaders
from tests.e2e.conftest import BACKEND, REAL_CLUSTER, on_emulator
from tests.e2e.fleet import example
from tests.support.realcluster import chart_operator_kubeconfig, running_cluster

pytestmark = pytest.mark.e2e

GRACE = 15  # --node-monitor-grace-period of this test's controller manager
TOLERATION = 2  # spec.availability.unreachableTolerationSeconds
NAME = "qwen-1-5b"


@pytest.fixture(scope="module")
def failing_cluster():
    """Three 16-NPU nodes under a controller manager that gives a silent node GRACE seconds."""
    if REAL_CLUSTER or BACKEND == "emulator":
        pytest.skip("needs a control plane of its own with a short node grace period")
    with running_cluster(nodes=3, npus_per_node=16, node_monitor_grace_seconds=GRACE) as handle:
        yield handle


@pytest.fixture
def cluster(request, failing_cluster):
    if on_emulator(request):
        pytest.skip("the emulator has no node lifecycle controller")
    return failing_cluster


@pytest.fixture(scope="module")
def operator_kubeconfig(failing_cluster, tmp_path_factory):
    """The operator runs as the chart's ServiceAccount on this cluster too."""
    return chart_operator_kubeconfig(failing_cluster, tmp_path_factory.mktemp("operator") / "kubeconfig")


def test_a_dead_nodes_replica_leaves_the_service_while_the_other_keeps_serving(failing_cluster, fleet):
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 2, "data": 2},
            autoscaling={"minReplicas": 2, "maxReplicas": 2},
            availability={"spread": "node", "unreachableTolerationSeconds": TOLERATION},
        )
    )
    fleet.wait_ready(NAME, 2, 60)
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in fleet.pods(NAME)}
    assert len(set(placed.values())) == 2, f"the real scheduler spread the replicas: {placed}"
    wait_for(lambda: len(serving_leaders(fleet.kube, fleet.namespace, NAME)) == 2, 30, "two serving leaders")

    failure = kill_serving_node(failing_cluster.kubelet, fleet.kube, fleet.namespace, NAME, GRACE, timeout=90)

    # The cut hit the node under one replica, and only that replica.
    assert failure.pods == [pod for pod, node in placed.items() if node == failure.node]
    assert failure.node_unknown is not None, "the node lifecycle controller never saw the node go silent"
    assert failure.out_of_service is not None, "the dead replica kept taking traffic"
    assert failure.fewest_survivors == 1, "the surviving replica stopped serving too"
    # Evicted by the taint manager after the short toleration (the admission default would wait 300 s).
    assert failure.evicted is not None
    (dead_pod,) = failure.pods
    try:
        pod = fleet.kube.get("Pod", fleet.namespace, dead_pod)
    except NotFound:  # the operator's own failover (the node's Lease stale) removed it already
        pod = None
    if pod is not None and pod["spec"]["nodeName"] == failure.node:
        reasons = {
            c.get("reason") for c in pod["status"].get("conditions", []) if c["type"] == "DisruptionTarget"
        }
        assert reasons == {"DeletionByTaintManager"}
    # With this grace period the node controller comes first; then, the node's Lease stale, the operator
    # force-deletes the evicted pod no kubelet confirms and makes the replica again on the third node.
    fleet.wait_ready(NAME, 2, NODE_LEASE_STALE_SECONDS + 30)
    assert fleet.kube.get("Pod", fleet.namespace, dead_pod)["spec"]["nodeName"] != failure.node

    # The node comes back: nothing of the fleet moves.
    failing_cluster.kubelet.power_on(failure.node)
    fleet.wait_ready(NAME, 2, 60)
    wait_for(lambda: len(serving_leaders(fleet.kube, fleet.namespace, NAME)) == 2, 30, "two serving leaders")
