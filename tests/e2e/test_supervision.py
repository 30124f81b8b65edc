"""The real dev cluster survives what it is used to test: a killed API server and an API outage.

A kube-apiserver or etcd killed with SIGKILL is reaped (no zombie left in /proc) and started again by the control
plane's supervisor, serving on the same port. After an API outage the node agent resumes its heartbeats and,
as a kubelet's status manager does, writes its pods' status again where the API's copy differs: the node
lifecycle controller marks the pods of a node it lost NotReady (here after its 90 s grace period, longer than
this test's outage, so the test marks them as the controller would), and the fleet is Ready again afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime

import pytest

from ascend_fleet.kube import scaled, wait_for
from tests.e2e.fleet import example
from tests.support.procfs import process_state

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 20.0


@pytest.fixture
def real(cluster):
    if cluster is None or not hasattr(cluster, "cluster"):
        pytest.skip("kills and stops the real control plane's components")
    return cluster.cluster


def _serving(real) -> bool:
    status, body = real.control_plane.request("/readyz", timeout=2.0)
    return status == 200 and body.strip() == b"ok"


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_a_killed_component_is_reaped_and_restarted_serving(real, kube, component):
    control_plane = real.control_plane
    killed = control_plane.pid(component)
    restarts = control_plane.restarts(component)
    assert killed is not None and process_state(killed) not in (None, "Z")

    os.kill(killed, signal.SIGKILL)
    wait_for(
        lambda: control_plane.pid(component) != killed and _serving(real),
        60,
        f"{component} restarted and the API ready",
        interval=0.2,
    )
    assert process_state(killed) is None, f"the killed {component} {killed} was left in /proc"
    assert control_plane.restarts(component) == restarts + 1
    assert control_plane.supervisor.exits(component)[-1] == -signal.SIGKILL
    # Serving objects again from the same etcd data: what was there is still there.
    wait_for(lambda: kube.get("Namespace", None, "default"), 30, "the default namespace")


def _mark_not_ready(kube, pod: dict) -> None:
    """What the node lifecycle controller does to the pods of a node whose heartbeats it missed."""
    current = kube.get("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
    for condition in current["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="False", reason="NodeNotReady")
    kube.replace("Pod", current["metadata"]["namespace"], current["metadata"]["name"], current, "status")


def _ready(pod: dict) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _lease_renewed_after(real, node: str, moment: datetime) -> bool:
    status, body = real.control_plane.request(
        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
    )
    if status != 200:
        return False
    lease = json.loads(body)
    renewed = datetime.strptime(lease["spec"]["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return renewed > moment


def test_after_an_api_outage_the_node_agent_sets_its_pods_ready_again(fleet, operator, real, kube):
    fleet.apply(example("sglang-small.yaml"))
    fleet.wait_ready("qwen-1-5b", 1, timeout=60)
    agent = real.kubelet

    with real.control_plane.outage("kube-apiserver"):
        time.sleep(scaled(OUTAGE_SECONDS))
    back = datetime.now(UTC)

    # Heartbeats resume soon after the API is back (backing off while it was down, not a full period late).
    for node in agent.node_names:
        wait_for(lambda node=node: _lease_renewed_after(real, node, back), 15, f"a fresh lease of {node}")
    # The agent has taken its pods up again (listed, same uids, its status the API's) before the fault.
    wait_for(
        lambda: (
            (pods := fleet.pods("qwen-1-5b")) and all(_ready(p) and agent.status_in_step(p) for p in pods)
        ),
        30,
        "the agent in step with its pods",
    )
    pods = fleet.pods("qwen-1-5b")
    uids = sorted(pod["metadata"]["uid"] for pod in pods)
    resyncs = agent.status_resyncs
    for pod in pods:
        _mark_not_ready(kube, pod)
    wait_for(
        lambda: all(_ready(pod) for pod in fleet.pods("qwen-1-5b")), 30, "the pods Ready again", interval=0.2
    )
    # The same pods, set Ready again by the agent writing its status back (not replaced by new pods).
    assert sorted(pod["metadata"]["uid"] for pod in fleet.pods("qwen-1-5b")) == uids
    assert agent.status_resyncs >= resyncs + len(pods)
    fleet.wait_ready("qwen-1-5b", 1, timeout=60)
    assert operator.thread is not None and operator.thread.error is None


def test_an_etcd_outage_is_survived_and_the_api_answers_again(real, kube):
    with real.outage("etcd"):
        time.sleep(scaled(5.0))
        assert not _serving(real)  # the API server reports it cannot reach its storage
    assert _serving(real)
    wait_for(lambda: kube.get("Namespace", None, "default"), 30, "the default namespace")
    assert real.control_plane.pid("etcd") is not None and real.control_plane.running("etcd")
