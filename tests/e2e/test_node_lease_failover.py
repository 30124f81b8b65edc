"""A node dies under a Service-mode inference, and the operator fails it over before Kubernetes would.

The control plane here keeps the upstream default node grace period (50 s): left to Kubernetes, the dead
node's replica would stay in the Service's endpoints until then, and its pods would be evicted but never gone
until an administrator tainted the node out of service. The operator reads the node's Lease instead: once it
goes unrenewed for NODE_LEASE_STALE_SECONDS the leader leaves the Service, the operator force-deletes its own
pods there and makes the replica again on the third node, with no taint and no one's help.
"""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.reconcile.nodeloss import REASON_NODE_LOST
from ascend_fleet.reconcile.timing import NODE_LEASE_POLL_SECONDS, NODE_LEASE_STALE_SECONDS
from ascend_fleet_dev.real.nodefailure import OUT_OF_SERVICE_TAINT, kill_serving_node
from tests.e2e.conftest import BACKEND, REAL_CLUSTER, on_emulator
from tests.e2e.fleet import example
from tests.support.realcluster import chart_operator_kubeconfig, running_cluster

pytestmark = pytest.mark.e2e

GRACE = 50  # kube-controller-manager's default --node-monitor-grace-period
NAME = "qwen-1-5b"


@pytest.fixture(scope="module")
def lease_cluster():
    """Three 16-NPU nodes under a controller manager with the upstream node grace period."""
    if REAL_CLUSTER or BACKEND == "emulator":
        pytest.skip("needs a control plane of its own whose nodes can be powered off")
    with running_cluster(nodes=3, npus_per_node=16, node_monitor_grace_seconds=GRACE) as handle:
        yield handle


@pytest.fixture
def cluster(request, lease_cluster):
    if on_emulator(request):
        pytest.skip("the emulator has no node Leases")
    return lease_cluster


@pytest.fixture(scope="module")
def operator_kubeconfig(lease_cluster, tmp_path_factory):
    """The operator runs as the chart's ServiceAccount: its Role in kube-node-lease is what lets it list."""
    return chart_operator_kubeconfig(lease_cluster, tmp_path_factory.mktemp("operator") / "kubeconfig")


def test_a_dead_node_is_failed_over_from_its_lease_with_no_taint(lease_cluster, fleet):
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 2, "data": 2},
            autoscaling={"minReplicas": 2, "maxReplicas": 2},
            availability={"spread": "node"},
        )
    )
    fleet.wait_ready(NAME, 2, 60)
    before = {p["metadata"]["name"]: p for p in fleet.pods(NAME)}

    failure = kill_serving_node(
        lease_cluster.kubelet, fleet.kube, fleet.namespace, NAME, GRACE, timeout=90, restore=True
    )

    # Out of the Service within the Lease threshold after the last renewal, before the node controller.
    assert failure.out_of_service is not None, "the dead replica kept its place in the Service"
    bound = NODE_LEASE_STALE_SECONDS - failure.heartbeat_age + 2 * NODE_LEASE_POLL_SECONDS + 2
    assert failure.out_of_service < min(bound, 30), failure
    assert failure.node_unknown is None or failure.node_unknown > failure.out_of_service
    assert failure.fewest_survivors == 1, "the surviving replica stopped serving too"
    # Made again on another node, with nobody tainting the dead one.
    assert failure.restored is not None, "the replica was not made again elsewhere"
    assert failure.tainted is None
    taints = fleet.kube.get("Node", None, failure.node)["spec"].get("taints") or []
    assert OUT_OF_SERVICE_TAINT["key"] not in {t["key"] for t in taints}
    (lost,) = failure.pods
    again = fleet.kube.get("Pod", fleet.namespace, lost)
    assert again["metadata"]["uid"] != before[lost]["metadata"]["uid"]
    assert again["spec"]["nodeName"] not in {failure.node, *(p["spec"]["nodeName"] for p in before.values())}
    assert again["metadata"]["labels"][names.LABEL_SERVING] == "true"
    (event,) = fleet.events(REASON_NODE_LOST)
    assert failure.node in (event.get("note") or event.get("message") or "")
    fleet.wait_ready(NAME, 2, 30)

    # The node comes back: the pod it still runs is gone from the API, and nothing else changes.
    lease_cluster.kubelet.power_on(failure.node)
    fleet.wait_ready(NAME, 2, 60)
    assert {p["spec"]["nodeName"] for p in fleet.pods(NAME)} == {
        again["spec"]["nodeName"],
        *(p["spec"]["nodeName"] for n, p in before.items() if n != lost),
    }
