"""Replicas the real scheduler cannot place: its sentence in status, and a half-placed gang gives its NPUs back;
replicas spread over zones, each knowing its zone from its own pod.

The emulator binds every pod at once, whatever it asks for, so these tests need the real kube-scheduler.
"""

from __future__ import annotations

import json

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.settings import ReconcileSettings
from ascend_fleet.control.state import fleet_state
from ascend_fleet.kube import wait_for
from ascend_fleet.render import validate
from tests.e2e.conftest import fast_settings
from tests.e2e.fleet import example, without_warnings

pytestmark = pytest.mark.e2e

GANG = "deepseek-70b"
SINGLE = "qwen-1-5b"
RESOURCE = "huawei.com/Ascend910"
NPUS_PER_POD = 8
GANG_TIMEOUT = 10.0
LABEL = "e2e.ascendfleet.io/placement"  # the one node this test's gang may use


@pytest.fixture
def settings():
    """The suite's timers, with a gang timeout and scheduler grace short enough to watch."""
    base = fast_settings()
    base.reconcile = ReconcileSettings.model_validate(
        {**base.reconcile.wire(), "gangTimeout": f"{GANG_TIMEOUT:g}s", "schedulerGrace": "3s"}
    )
    return base


@pytest.fixture
def real(cluster):
    if cluster is None or hasattr(cluster, "emulator"):
        pytest.skip("needs the real kube-scheduler and the control plane's kubectl")
    return cluster


def free_npus(real, settled: bool = False) -> dict[str, int]:
    """NPUs not requested by any unfinished pod, by node (with ``settled``, only nodes whose NPUs will not come
    back soon: no pod terminating, none in a namespace being deleted)."""
    nodes = json.loads(real.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    free = {n["metadata"]["name"]: int(n["status"]["allocatable"].get(RESOURCE, "0")) for n in nodes}
    namespaces = json.loads(real.kubectl("get", "namespaces", "-o", "json").stdout)["items"]
    leaving = {
        n["metadata"]["name"] for n in namespaces if (n.get("status") or {}).get("phase") == "Terminating"
    }
    pods = json.loads(real.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    for pod in pods:
        node = pod["spec"].get("nodeName")
        going = pod["metadata"].get("deletionTimestamp") or pod["metadata"].get("namespace") in leaving
        if settled and node in free and going:
            # Its NPUs are about to come back, which would let the whole gang fit: an earlier test's namespace
            # is deleted pod by pod, so a pod of it may not be terminating yet.
            del free[node]
        if node in free and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            for container in pod["spec"]["containers"]:
                free[node] -= int(((container.get("resources") or {}).get("requests") or {}).get(RESOURCE, 0))
    return free


@pytest.fixture
def one_pod_of_room(real, fleet):
    """One node labelled for this test, filled until exactly one 8-NPU pod fits on it; the label goes after."""

    # The session's nodes are shared: the pods of earlier tests' namespaces may still be terminating.
    def a_node_with_room() -> dict[str, int] | None:
        now = free_npus(real, settled=True)
        return now if now and max(now.values()) >= NPUS_PER_POD else None

    free = wait_for(a_node_with_room, 180, f"a node with {NPUS_PER_POD} free NPUs", interval=2.0)
    node = max(free, key=lambda n: free[n])
    real.kubectl("label", "node", node, f"{LABEL}={fleet.namespace}")
    filler = free[node] - NPUS_PER_POD
    if filler:
        npus = {RESOURCE: str(filler)}
        fleet.kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "filler", "namespace": fleet.namespace},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {"name": "c", "image": "filler", "resources": {"requests": npus, "limits": npus}}
                    ],
                },
            }
        )
    yield node
    real.kubectl("label", "node", node, f"{LABEL}-")


def gang_pods(fleet) -> list[dict]:
    return [p for p in fleet.pods(GANG) if not p["metadata"].get("deletionTimestamp")]


def test_a_gang_that_cannot_be_completed_says_why_and_gives_its_node_back(real, fleet, one_pod_of_room):
    doc = example(
        "vllm-multinode-tp8-pp4.yaml",
        parallelism={"tensor": 8, "pipeline": 2, "data": 1},
        scheduling={"nodeSelector": {LABEL: fleet.namespace}},
    )
    fleet.apply(doc)

    # The scheduler's cache can still hold an earlier test's pod for a moment after the API server let it go,
    # so the first verdict may be "neither fits"; the guarantee is the state the gang settles in.
    def half_placed():
        c = fleet.condition(GANG, "Ready")
        pods = gang_pods(fleet)
        bound = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [p for p in pods if not p["spec"].get("nodeName")]
        return (
            c.get("reason") == "Unschedulable"
            and len(bound) == 1
            and len(waiting) == 1
            and (c, bound, waiting)
        )

    ready, bound, waiting = wait_for(
        half_placed, 60, "Ready=False/Unschedulable with one pod of the gang placed"
    )
    assert [p["spec"]["nodeName"] for p in bound] == [one_pod_of_room]
    scheduler_says = next(
        c["message"] for c in waiting[0]["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert "Insufficient huawei.com/Ascend910" in scheduler_says
    assert ready["status"] == "False"
    sentence = f"0 of 1 replicas ready; replica 0 cannot be placed: pod {waiting[0]['metadata']['name']}: {scheduler_says}"
    wait_for(
        lambda: without_warnings(fleet.condition(GANG, "Ready").get("message", "")) == sentence,
        15,
        "the scheduler's sentence",
    )
    # An earlier verdict ("neither fits", see above) may have its own Event; the settled one must be there too.
    wait_for(
        lambda: [e for e in fleet.events("Unschedulable") if scheduler_says in e["message"]],
        10,
        "the Unschedulable Event with the scheduler's sentence",
    )
    assert {e["type"] for e in fleet.events("Unschedulable")} == {"Warning"}
    assert not fleet.events("GangReleased")  # within the gang timeout the placed pod keeps its node

    # After the timeout the placed pod is deleted, freeing its NPUs; the gang comes back with the backoff. (The
    # wait is a bound for a loaded machine, not the timing: the timeout itself is checked by the unit tests.)
    held = bound[0]["metadata"]["uid"]
    (released,) = wait_for(lambda: fleet.events("GangReleased"), GANG_TIMEOUT + 50, "GangReleased")
    assert released["type"] == "Warning"
    assert f"{bound[0]['metadata']['name']} on {one_pod_of_room}" in released["message"]
    wait_for(lambda: held not in {p["metadata"]["uid"] for p in fleet.pods(GANG)}, 30, "the held pod gone")
    restarts = wait_for(lambda: fleet.get(GANG)["status"].get("groupRestarts"), 10, "a recorded restart")
    assert restarts[0]["replica"] == 0 and restarts[0]["count"] >= 1
    wait_for(lambda: len(gang_pods(fleet)) == 2, 30, "the gang recreated")


def test_a_scheduler_name_nobody_answers_is_named_in_status(real, fleet):
    fleet.apply(example("sglang-small.yaml", scheduling={"schedulerName": "no-such-scheduler"}))
    ready = wait_for(
        lambda: (c := fleet.condition(SINGLE, "Ready")).get("reason") == "NoScheduler" and c,
        30,
        "Ready=False/NoScheduler",
    )
    assert without_warnings(ready["message"]) == (
        f"0 of 1 replicas ready; replica 0 cannot be placed: pod {SINGLE}-0: it stays Pending and no "
        "scheduler named no-such-scheduler answers"
    )
    (warning,) = wait_for(lambda: fleet.events("NoScheduler"), 10, "the NoScheduler Event")
    assert warning["type"] == "Warning" and "no scheduler named no-such-scheduler" in warning["message"]
    (pod,) = fleet.pods(SINGLE)
    assert not pod["spec"].get("nodeName") and pod["metadata"]["labels"][names.LABEL_REPLICA] == "0"


@pytest.fixture
def one_labelled_node(real, fleet):
    """The node with the most free NPUs, alone labelled for this test; the label goes after."""
    free = wait_for(lambda: free_npus(real), 60, "the nodes' free NPUs")
    node = max(free, key=lambda n: free[n])
    real.kubectl("label", "node", node, f"{LABEL}={fleet.namespace}")
    yield node
    real.kubectl("label", "node", node, f"{LABEL}-")


def test_a_spread_over_more_nodes_than_the_pods_may_use_says_what_would_fit(real, fleet, one_labelled_node):
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 2, "data": 2},
            autoscaling={"minReplicas": 2, "maxReplicas": 2},
            availability={"spread": "node", "minDomains": 2},
            scheduling={"nodeSelector": {LABEL: fleet.namespace}},
        )
    )
    # One eligible node, two domains wanted: the scheduler counts the missing domain as empty, so it places one
    # replica and refuses the other for the spread however much room the node has.
    # The scheduler's cache may still count an earlier test's pod on the node, so a first verdict can be "no room";
    # the guarantee is the state the replicas settle in.
    hint = (
        "(spec.availability spreads replicas over at least 2 nodes by kubernetes.io/hostname: give the pods' "
        "eligible nodes that many distinct kubernetes.io/hostname values, or lower spec.availability.minDomains)"
    )
    ready = wait_for(
        lambda: (
            (c := fleet.condition(SINGLE, "Ready")).get("reason") == "Unschedulable"
            and without_warnings(c.get("message", "")).endswith(hint)
            and c
        ),
        60,
        "Ready=False/Unschedulable saying what would fit",
    )
    assert ready["status"] == "False"
    assert "didn't match pod topology spread constraints" in ready["message"]
    bound = wait_for(
        lambda: [p["spec"]["nodeName"] for p in fleet.pods(SINGLE) if p["spec"].get("nodeName")],
        10,
        "the first replica bound",
    )
    assert bound == [one_labelled_node], "the scheduler placed the first replica on the one eligible node"


ZONE = "topology.kubernetes.io/zone"


@pytest.fixture
def two_zones(real, fleet):
    """The two nodes with the most free NPUs, in zones a and b; the labels go after."""
    free = wait_for(lambda: free_npus(real), 60, "the nodes' free NPUs")
    nodes = sorted(free, key=lambda n: -free[n])[:2]
    zones = {node: f"{fleet.namespace}-{zone}" for node, zone in zip(nodes, "ab", strict=True)}
    for node, zone in zones.items():
        real.kubectl("label", "node", node, f"{ZONE}={zone}")
    yield zones
    for node in zones:
        real.kubectl("label", "node", node, f"{ZONE}-")


def test_replicas_spread_over_zones_and_a_rule_keeps_both_zones_serving(real, fleet, two_zones):
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 2, "data": 2},
            autoscaling={"minReplicas": 2, "maxReplicas": 2},
            availability={"spread": "zone"},
        )
    )
    fleet.wait_ready(SINGLE, 2, 60)
    leaders = sorted(
        (p for p in fleet.pods(SINGLE) if p["metadata"]["labels"][names.LABEL_ROLE] == names.ROLE_LEADER),
        key=lambda p: p["metadata"]["labels"][names.LABEL_REPLICA],
    )
    assert len(leaders) == 2
    # The scheduler put one replica in each zone (only the labelled nodes have the spread's key), and the API
    # server copied each node's zone onto its pod at binding: the operator reads the zone there, not from Nodes.
    assert {two_zones[p["spec"]["nodeName"]] for p in leaders} == set(two_zones.values())
    assert [p["metadata"]["labels"].get(ZONE) for p in leaders] == [
        two_zones[p["spec"]["nodeName"]] for p in leaders
    ]
    body = {"apiVersion": names.API_VERSION, "kind": names.KIND, **fleet.get(SINGLE)}
    state = fleet_state(validate(body), fleet.pods(SINGLE))
    assert {r.domain for r in state.replica_states.values()} == set(two_zones.values())
    keeper = state.domain_keeper(1)
    assert keeper is not None and keeper.startswith(
        f"replica 1 is the last serving replica on zone {state.replica_states[1].domain}: without it 1 zone"
    )
