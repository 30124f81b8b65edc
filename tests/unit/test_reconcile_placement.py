"""Replicas that cannot be placed: the scheduler's sentence in Ready, and half-placed gangs give NPUs back."""

from __future__ import annotations

import copy

from ascend_fleet.api.settings import ReconcileSettings
from ascend_fleet.api.times import rfc3339, rfc3339_ms
from ascend_fleet.observed import slim_pod
from ascend_fleet.reconcile.plan import plan_pass
from ascend_fleet.reconcile.writes import Observed
from ascend_fleet.render import Owner, render_pdb, render_replica, render_services
from tests.unit.test_reconcile_plan import make

NOW = 1_800_000_000.0
SETTINGS = ReconcileSettings(backoff_initial=30, backoff_max=600, gang_timeout=300, scheduler_grace=30)
NO_FIT = "0/2 nodes are available: 2 Insufficient huawei.com/Ascend910."


def placed(pod: dict, node: str, created: float) -> dict:
    """The pod bound to ``node`` and running, not ready yet (its model loads)."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["creationTimestamp"] = rfc3339(created)
    pod["spec"]["nodeName"] = node
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {"name": "engine", "ready": False, "restartCount": 0, "state": {"running": {}}}
        ],
    }
    return pod


def pending(pod: dict, created: float, scheduler_says: str | None) -> dict:
    """The pod unbound; with the scheduler's PodScheduled=False sentence, or no condition at all."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["creationTimestamp"] = rfc3339(created)
    conditions = []
    if scheduler_says is not None:
        conditions = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduler_says}
        ]
    pod["status"] = {"phase": "Pending", "conditions": conditions}
    return pod


def gang(valid, created: float, leader_node: str | None, follower_says: str | None) -> Observed:
    """One 2-pod replica: rank 0 placed on ``leader_node`` (or pending too), rank 1 pending."""
    obj, layout = valid.obj, valid.layout
    owner = Owner.of(obj)
    leader, follower = (p for p in render_replica(obj.spec, owner, 0, layout) if p["kind"] == "Pod")
    pods = [
        placed(leader, leader_node, created) if leader_node else pending(leader, created, follower_says),
        pending(follower, created, follower_says),
    ]
    services = {s["metadata"]["name"]: s for s in render_services(obj.spec, owner, layout)}
    return Observed(pods=pods, services=services, pdb=render_pdb(obj.spec, owner, layout))


def ready_condition(result) -> dict:
    return next(c for c in result.status["conditions"] if c["type"] == "Ready")


def with_status(valid_maker, result, **kwargs):
    """The object as the next pass sees it: the status this pass wrote stored."""
    return valid_maker(status=result.status, **kwargs)


def two_pod_replica(**kwargs):
    return make(data=1, tensor=8, pipeline=2, **kwargs)


def test_an_unschedulable_rank_puts_the_schedulers_sentence_in_ready_and_one_event():
    valid = two_pod_replica()
    observed = gang(valid, NOW - 10, "node-1", NO_FIT)
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    ready = ready_condition(result)
    assert (ready["status"], ready["reason"]) == ("False", "Unschedulable")
    assert ready["message"] == f"0 of 1 replicas ready; replica 0 cannot be placed: pod llm-0-1: {NO_FIT}"
    (event,) = [e for e in result.events if e.reason == "Unschedulable"]
    assert event.type == "Warning" and event.message == f"replica 0 cannot be placed: pod llm-0-1: {NO_FIT}"
    assert not result.deletes  # within the gang timeout the leader keeps its node

    again = plan_pass(with_status(two_pod_replica, result).obj, valid.layout, observed, NOW + 5, SETTINGS)
    assert ready_condition(again)["message"] == ready["message"]
    assert not [e for e in again.events if e.reason == "Unschedulable"]  # the same sentence: no new Event


def test_a_half_placed_gang_asks_to_look_again_when_its_timeout_ends():
    valid = two_pod_replica()
    result = plan_pass(valid.obj, valid.layout, gang(valid, NOW - 100, "node-1", NO_FIT), NOW, SETTINGS)
    assert not result.deletes
    assert result.requeue_after is not None and result.requeue_after <= 200


def test_a_half_placed_gang_past_its_timeout_gives_its_pods_back_and_counts_a_restart():
    valid = two_pod_replica()
    result = plan_pass(valid.obj, valid.layout, gang(valid, NOW - 301, "node-1", NO_FIT), NOW, SETTINGS)
    assert sorted(d.name for d in result.deletes if d.kind == "Pod") == ["llm-0", "llm-0-1"]
    (event,) = [e for e in result.events if e.reason == "GangReleased"]
    assert event.type == "Warning"
    assert "llm-0-1 not placed within 300s" in event.message and "llm-0 on node-1" in event.message
    assert result.status["groupRestarts"] == [{"replica": 0, "count": 1, "lastTime": rfc3339_ms(NOW)}]


def test_a_second_release_waits_for_the_restart_backoff():
    restarted = {"groupRestarts": [{"replica": 0, "count": 1, "lastTime": rfc3339_ms(NOW - 400)}]}
    valid = two_pod_replica(status=restarted)
    result = plan_pass(valid.obj, valid.layout, gang(valid, NOW - 301, "node-1", NO_FIT), NOW, SETTINGS)
    (event,) = [e for e in result.events if e.reason == "GangReleased"]
    assert event.message.endswith("recreating in 30s (restart 2)")
    assert result.status["groupRestarts"][0]["count"] == 2


def test_with_volcano_the_podgroup_owns_the_gang_and_nothing_is_released():
    valid = two_pod_replica(scheduler="volcano")
    result = plan_pass(valid.obj, valid.layout, gang(valid, NOW - 1000, "node-1", NO_FIT), NOW, SETTINGS)
    assert not result.deletes
    assert ready_condition(result)["reason"] == "Unschedulable"


def test_a_gang_with_nothing_placed_holds_nothing_and_is_not_released():
    valid = two_pod_replica()
    result = plan_pass(valid.obj, valid.layout, gang(valid, NOW - 1000, None, NO_FIT), NOW, SETTINGS)
    assert not result.deletes
    assert ready_condition(result)["message"].endswith(f"replica 0 cannot be placed: pod llm-0: {NO_FIT}")


def test_a_pod_no_scheduler_answers_is_reported_after_the_grace_period():
    valid = two_pod_replica(scheduler="my-scheduler")
    early = plan_pass(valid.obj, valid.layout, gang(valid, NOW - 10, None, None), NOW, SETTINGS)
    assert ready_condition(early)["reason"] == "ReplicasNotReady"
    assert early.requeue_after is not None and early.requeue_after <= 20  # looks again when the grace ends

    late = plan_pass(valid.obj, valid.layout, gang(valid, NOW - 31, None, None), NOW, SETTINGS)
    ready = ready_condition(late)
    assert ready["reason"] == "NoScheduler"
    assert ready["message"] == (
        "0 of 1 replicas ready; replica 0 cannot be placed: pod llm-0: it stays Pending and no scheduler "
        "named my-scheduler answers"
    )
    assert [e.reason for e in late.events if e.type == "Warning"] == ["NoScheduler"]


def test_replicas_with_the_same_cause_share_one_sentence():
    valid = make(data=2, tensor=8, pipeline=1)
    obj, layout = valid.obj, valid.layout
    owner = Owner.of(obj)
    pods = [
        pending(p, NOW - 5, NO_FIT)
        for r in range(2)
        for p in render_replica(obj.spec, owner, r, layout)
        if p["kind"] == "Pod"
    ]
    services = {s["metadata"]["name"]: s for s in render_services(obj.spec, owner, layout)}
    observed = Observed(pods=pods, services=services, pdb=render_pdb(obj.spec, owner, layout))
    result = plan_pass(obj, layout, observed, NOW, SETTINGS)
    assert ready_condition(result)["message"] == (
        f"0 of 2 replicas ready; replicas 0, 1 cannot be placed: pod llm-0: {NO_FIT}"
    )


SPREAD_REFUSED = (
    "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints. preemption: 0/1 nodes are "
    "available: 1 Preemption is not helpful for scheduling."
)


def spread_refused(availability):
    """Two one-pod replicas, the second refused by the scheduler for the spread."""
    valid = make(data=2, tensor=8, pipeline=1, availability=availability)
    obj, layout = valid.obj, valid.layout
    owner = Owner.of(obj)
    first, second = (
        p for r in range(2) for p in render_replica(obj.spec, owner, r, layout) if p["kind"] == "Pod"
    )
    pods = [placed(first, "node-1", NOW - 5), pending(second, NOW - 5, SPREAD_REFUSED)]
    services = {s["metadata"]["name"]: s for s in render_services(obj.spec, owner, layout)}
    observed = Observed(pods=pods, services=services, pdb=render_pdb(obj.spec, owner, layout))
    return ready_condition(plan_pass(obj, layout, observed, NOW, SETTINGS))


def test_a_spread_the_domains_cannot_meet_says_what_would_fit():
    ready = spread_refused({"spread": "zone", "minDomains": 3})
    assert ready["status"] == "False" and ready["reason"] == "Unschedulable"
    assert ready["message"] == (
        f"0 of 2 replicas ready; replica 1 cannot be placed: pod llm-1: {SPREAD_REFUSED} (spec.availability "
        "spreads replicas over at least 3 zones by topology.kubernetes.io/zone: give the pods' eligible nodes "
        "that many distinct topology.kubernetes.io/zone values, or lower spec.availability.minDomains)"
    )


def test_a_spread_refusal_without_spec_availability_is_the_schedulers_sentence_alone():
    # The user's own topologySpreadConstraints (spec.scheduling or spec.template): no availability to blame.
    ready = spread_refused(None)
    assert (
        ready["message"] == f"0 of 2 replicas ready; replica 1 cannot be placed: pod llm-1: {SPREAD_REFUSED}"
    )


def test_slim_pods_keep_what_placement_reads():
    pod = placed(pending({"metadata": {"name": "p"}, "spec": {"containers": []}}, NOW, None), "node-1", NOW)
    pod["spec"]["schedulerName"] = "my-scheduler"
    slim = slim_pod(pod)
    assert slim["spec"] == {"nodeName": "node-1", "schedulerName": "my-scheduler"}
    assert slim["metadata"]["creationTimestamp"] == rfc3339(NOW)


def test_a_busy_scheduler_that_answered_another_pod_is_not_reported_missing():
    valid = two_pod_replica()
    observed = gang(
        valid, NOW - 60, "node-1", None
    )  # rank 0 bound by default-scheduler, rank 1 not tried yet
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert ready_condition(result)["reason"] == "ReplicasNotReady"
    assert not [e for e in result.events if e.type == "Warning"]
