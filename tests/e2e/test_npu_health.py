"""An NPU breaks under a running replica: the device plugin reports it, a rule replaces the replica elsewhere.

The node agent plays the Ascend device plugin on the real control plane: it writes each pod's NPUs on the pod
and publishes every node's NPU health in kube-system. Breaking an NPU lists it unhealthy with its fault and takes
it out of the node's allocatable. The operator runs with its control loop, as the chart's ServiceAccount; the
only rule is ``npu_unhealthy``'s, which no Prometheus answers (the operator reads the ConfigMaps itself).
"""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.settings import ControlSettings, PrometheusSettings
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.handlers.control import control_loop_hook
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import wait_for
from tests.e2e.conftest import BACKEND, REAL_CLUSTER, fast_settings, on_emulator, operator_client
from tests.e2e.fleet import Fleet, example
from tests.support.realcluster import chart_operator_kubeconfig, running_cluster

pytestmark = pytest.mark.e2e

NAME = "qwen-1-5b"
RULE = {"metric": "npu_unhealthy", "threshold": 0, "for": "2s", "action": "replace"}


@pytest.fixture(scope="module")
def npu_cluster():
    """Three 8-NPU nodes: two replicas of 8 NPUs each, and one node free for a replacement."""
    if REAL_CLUSTER or BACKEND == "emulator":
        pytest.skip("needs the node agent's device plugin")
    with running_cluster(nodes=3, npus_per_node=8) as handle:
        yield handle


@pytest.fixture
def cluster(request, npu_cluster):
    if on_emulator(request):
        pytest.skip("the emulator has no device plugin")
    return npu_cluster


@pytest.fixture(scope="module")
def operator_kubeconfig(npu_cluster, tmp_path_factory):
    return chart_operator_kubeconfig(npu_cluster, tmp_path_factory.mktemp("operator") / "kubeconfig")


@pytest.fixture
def operator(request, cluster):
    """The operator with its control loop; no Prometheus is asked (the one rule reads the API)."""
    settings = fast_settings().model_copy(
        update={
            "prometheus": PrometheusSettings(url="http://127.0.0.1:9"),
            "control": ControlSettings(interval=1.0, step=1.0),
        }
    )
    kube = operator_client(request, cluster)
    context = OperatorContext(settings, kube)
    context.extra_startup.append(control_loop_hook(ControlLoop(settings, kube)))
    thread = OperatorThread(context, RunOptions()).__enter__()
    yield thread
    thread.stop()


def test_a_replica_on_a_broken_npu_is_replaced_on_healthy_npus_of_another_node(npu_cluster, fleet: Fleet):
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 8, "data": 2},
            autoscaling={"minReplicas": 2, "maxReplicas": 2, "restartCooldown": "10m"},
            disruption={"maxUnavailable": 1, "drainSeconds": 1},
            rules=[RULE],
        )
    )
    fleet.wait_ready(NAME, 2, 60)
    before = {p["metadata"]["name"]: p for p in fleet.pods(NAME)}
    # The device plugin wrote each pod's eight NPUs on it.
    for pod in before.values():
        assert len(pod["metadata"]["annotations"][names.ANNOTATION_NPUS_MOUNTED].split(",")) == 8

    victim = next(p for p in before.values() if p["metadata"]["labels"][names.LABEL_REPLICA] == "1")
    broken_node = victim["spec"]["nodeName"]
    npu = npu_cluster.kubelet.mark_npu_unhealthy(broken_node, 3)

    # The fault is where the device plugin puts it, and the node's allocatable lost the NPU.
    configmap = fleet.kube.get(
        "ConfigMap", names.DEVICE_INFO_NAMESPACE, names.DEVICE_INFO_PREFIX + broken_node
    )
    assert npu in configmap["data"][names.DEVICE_INFO_KEY]
    node = fleet.kube.get("Node", None, broken_node)
    assert node["status"]["allocatable"]["huawei.com/Ascend910"] == "7"

    def replaced():
        actions = (fleet.get(NAME).get("status") or {}).get("actions") or []
        return next((a for a in actions if a["action"] == "replace"), None)

    action = wait_for(replaced, 60, "a replace decision in status.actions")
    assert action["target"] == "replica-1"
    assert f"away from {npu} on {broken_node} (SeparateNPU, fault 80E01801)" in action["result"]
    wait_for(
        lambda: [e for e in fleet.events("RuleReplace") if npu in e.get("message", "")],
        10,
        "a RuleReplace Event naming the NPU",
    )

    def recreated():
        pods = [p for p in fleet.pods(NAME) if p["metadata"]["labels"][names.LABEL_REPLICA] == "1"]
        fresh = [
            p for p in pods if p["metadata"]["uid"] != victim["metadata"]["uid"] and p["spec"].get("nodeName")
        ]
        return fresh[0] if fresh else None

    new = wait_for(recreated, 90, "replica 1 recreated and scheduled")
    assert new["spec"]["nodeName"] != broken_node, "the replacement got the broken NPU's node again"
    fleet.wait_ready(NAME, 2, 60)
    # The healthy replica was not touched, and no second replace followed (the new NPUs are healthy).
    keeper = next(p for p in before.values() if p["metadata"]["labels"][names.LABEL_REPLICA] == "0")
    assert keeper["metadata"]["uid"] in {p["metadata"]["uid"] for p in fleet.pods(NAME)}
    actions = fleet.get(NAME)["status"]["actions"]
    assert [a["target"] for a in actions if a["action"] == "replace"] == ["replica-1"]
