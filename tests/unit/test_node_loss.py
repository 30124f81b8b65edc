"""A dead node, told by its Lease: the decision (on an injected clock), and what the planner writes for it."""

from __future__ import annotations

from ascend_fleet.api import names
from ascend_fleet.handlers.nodeleases import NodeLeases
from ascend_fleet.reconcile.nodeleases import dead_nodes, observe_leases
from ascend_fleet.reconcile.nodeloss import REASON_NODE_LOST, avoid_nodes
from ascend_fleet.reconcile.plan import plan_pass
from ascend_fleet.reconcile.timing import (
    KUBELET_LEASE_RENEW_SECONDS,
    NODE_LEASE_STALE_SECONDS,
    NODE_MONITOR_GRACE_SECONDS,
)
from ascend_fleet.reconcile.writes import Delete, Observed
from tests.unit.test_reconcile_plan import NOW, SETTINGS, fleet, make


def lease(node: str, renew: str | None) -> dict:
    return {"metadata": {"name": node}, "spec": {"renewTime": renew} if renew else {}}


def test_the_threshold_misses_two_renewals_and_beats_the_node_controller():
    assert NODE_LEASE_STALE_SECONDS >= 2 * KUBELET_LEASE_RENEW_SECONDS
    assert NODE_LEASE_STALE_SECONDS < 30 < NODE_MONITOR_GRACE_SECONDS


def test_a_node_is_dead_once_its_renew_time_stays_unchanged_past_the_threshold():
    seen = observe_leases({}, [lease("a", "t1"), lease("b", "t1")], now=100.0)
    seen = observe_leases(seen, [lease("a", "t2"), lease("b", "t1")], now=110.0)
    assert dead_nodes(seen, 100.0 + NODE_LEASE_STALE_SECONDS) == frozenset()  # not past it yet
    assert dead_nodes(seen, 100.5 + NODE_LEASE_STALE_SECONDS) == {"b"}
    # a renewal brings it back
    seen = observe_leases(seen, [lease("a", "t2"), lease("b", "t3")], now=121.0)
    assert dead_nodes(seen, 121.0 + 1) == frozenset()


def test_the_nodes_own_clock_does_not_count():
    """renewTime is the node's clock: only a change of it counts, when the operator saw it."""
    seen = observe_leases({}, [lease("a", "1999-01-01T00:00:00.000000Z")], now=5.0)
    assert dead_nodes(seen, 6.0) == frozenset()


def test_a_node_without_lease_or_renew_time_is_never_called_dead():
    seen = observe_leases({}, [lease("a", None), {"metadata": {}, "spec": {"renewTime": "t"}}], now=0.0)
    assert seen == {} and dead_nodes(seen, 1e9) == frozenset()


class FakeKube:
    def __init__(self) -> None:
        self.leases = [lease("n1", "t1"), lease("n2", "t1")]
        self.calls: list[tuple] = []

    def list(self, kind, namespace, selector=None, *, cached=False):
        self.calls.append((kind, namespace, cached))
        return self.leases


def test_node_leases_reports_each_death_once_on_its_clock():
    kube, clock = FakeKube(), [0.0]
    leases = NodeLeases(kube, clock=lambda: clock[0])  # type: ignore[arg-type]
    died = []
    for second in range(int(NODE_LEASE_STALE_SECONDS) + 3):  # one list a second
        clock[0] = float(second)
        if second == 10:
            kube.leases = [lease("n1", "t2"), lease("n2", "t1")]  # n1 renews, n2 stays silent
        died.append(leases.refresh())
    first = int(NODE_LEASE_STALE_SECONDS) + 1  # silent for more than the threshold since it was first seen
    assert [d for d in died[:first] if d] == []
    assert died[first] == {"n2"} and leases.dead == {"n2"}
    assert died[first + 1] == frozenset() and leases.dead == {"n2"}  # told once, still dead
    assert kube.calls[0] == ("Lease", names.NODE_LEASE_NAMESPACE, True)


def test_after_a_gap_in_the_lists_every_node_is_watched_afresh():
    kube, clock = FakeKube(), [0.0]
    leases = NodeLeases(kube, clock=lambda: clock[0])  # type: ignore[arg-type]
    leases.refresh()
    clock[0] = NODE_LEASE_STALE_SECONDS + 10  # an API outage: nothing listed, nothing renewed
    kube.leases = [lease("n1", "t2"), lease("n2", "t1")]
    assert leases.refresh() == frozenset()  # n2's silence during the gap proves nothing
    for second in range(int(NODE_LEASE_STALE_SECONDS) + 2):
        clock[0] = NODE_LEASE_STALE_SECONDS + 10 + second
        kube.leases = [lease("n1", f"t{second}"), lease("n2", "t1")]
        leases.refresh()
    assert leases.dead == {"n2"}


def test_every_node_silent_at_once_is_no_node_dead():
    seen = observe_leases({}, [lease("a", "t"), lease("b", "t")], now=0.0)
    assert dead_nodes(seen, NODE_LEASE_STALE_SECONDS + 1) == frozenset()
    seen = observe_leases(seen, [lease("a", "t2"), lease("b", "t")], now=NODE_LEASE_STALE_SECONDS)
    assert dead_nodes(seen, NODE_LEASE_STALE_SECONDS + 1) == {"b"}


def on_nodes(observed: Observed, nodes: list[str]) -> Observed:
    for pod, node in zip(observed.pods, nodes, strict=True):
        pod["spec"]["nodeName"] = node
    return observed


def test_a_replica_on_a_dead_node_leaves_the_service_and_its_pods_are_force_deleted():
    valid = make(data=2, tensor=8)
    observed = on_nodes(fleet(valid), ["n1", "n2"])
    observed.dead_nodes = frozenset({"n2"})
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert [(p.name, p.body) for p in result.patches] == [
        ("llm-1", {"metadata": {"labels": {names.LABEL_SERVING: "false"}}})
    ]
    assert result.deletes == [Delete("Pod", "llm-1", force=True)]
    assert not result.creates  # the name is still taken this pass
    assert [e.reason for e in result.events] == [REASON_NODE_LOST]
    assert "n2" in result.events[0].message
    assert result.requeue_after is not None
    assert result.status["readyReplicas"] == 1


def test_a_gang_across_nodes_loses_its_dead_rank_by_force_and_the_others_gracefully():
    valid = make(data=1, tensor=8, pipeline=2)  # two 8-NPU pods per replica
    observed = on_nodes(fleet(valid), ["n1", "n2"])
    observed.dead_nodes = frozenset({"n2"})
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert sorted(result.deletes, key=lambda d: d.name) == [
        Delete("Pod", "llm-0"),
        Delete("Pod", "llm-0-1", force=True),
    ]
    assert [p.name for p in result.patches] == ["llm-0"]  # the leader leaves the Service too


def test_pods_already_evicted_on_a_dead_node_are_force_deleted():
    valid = make(data=2, tensor=8)
    observed = on_nodes(fleet(valid), ["n1", "n2"])
    observed.pods[1]["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    observed.dead_nodes = frozenset({"n2"})
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert result.deletes == [Delete("Pod", "llm-1", force=True)]


def test_the_replica_made_again_keeps_off_dead_nodes():
    valid = make(data=2, tensor=8)
    observed = on_nodes(fleet(valid, replicas=[0]), ["n1"])
    observed.dead_nodes = frozenset({"n2", "n3"})
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    (pod,) = [o for o in result.creates if o["kind"] == "Pod"]
    assert pod["metadata"]["name"] == "llm-1"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2", "n3"]}]}
    ]


def test_without_dead_nodes_nothing_changes():
    valid = make(data=2, tensor=8)
    result = plan_pass(valid.obj, valid.layout, on_nodes(fleet(valid), ["n1", "n2"]), NOW, SETTINGS)
    assert not result.writes_children


def test_avoiding_nodes_adds_to_every_term_of_the_users_affinity():
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    pod = {"kind": "Pod", "spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term, {}]}}}}}  # fmt: skip
    avoided = avoid_nodes(pod, {"dead"})
    terms = avoided["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    field = {"key": "metadata.name", "operator": "NotIn", "values": ["dead"]}
    assert [t["matchFields"] for t in terms["nodeSelectorTerms"]] == [[field], [field]]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == term["matchExpressions"]
    assert "matchFields" not in term  # the input is left as it was
    assert avoid_nodes(pod, set()) is pod
