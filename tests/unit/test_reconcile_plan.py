"""The reconciler's pure plan: gang restarts, backoff, drains, rollouts within the budget, quiet when converged."""

from __future__ import annotations

import copy

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.settings import ReconcileSettings
from ascend_fleet.api.times import rfc3339, rfc3339_ms
from ascend_fleet.reconcile.plan import backoff_delay, plan_invalid, plan_pass
from ascend_fleet.reconcile.writes import Observed
from ascend_fleet.render import network_policy, render_pdb, render_replica, render_services, validate
from tests.support.documents import inference

NOW = 1_800_000_000.0
SETTINGS = ReconcileSettings(backoff_initial=30, backoff_max=600)


def make(
    data=2,
    tensor=8,
    pipeline=1,
    image="engine:v1",
    max_unavailable=1,
    drain=30,
    status=None,
    scheduler=None,
    availability=None,
):
    doc = (
        inference("llm")
        .namespace("ai")
        .uid("uid-1")
        .generation(3)
        .engine("vllm-ascend", **({"image": image} if image else {}))
        .parallelism(tensor=tensor, pipeline=pipeline, data=data)
        .section("disruption", maxUnavailable=max_unavailable, drainSeconds=drain)
    )
    if scheduler:
        doc.section("scheduling", schedulerName=scheduler)
    if availability:
        doc.section("availability", **availability)
    if status:
        doc.status(status)
    return validate(doc.build())


def running(pod, ready=True, restarts=0):
    pod = copy.deepcopy(pod)
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [
            {"name": "engine", "ready": ready, "restartCount": restarts, "state": {"running": {}}}
        ],
    }
    return pod


def fleet(valid, replicas=None, **pod_state):
    obj, layout = valid.obj, valid.layout
    from ascend_fleet.render import Owner

    owner = Owner.of(obj)
    pods = [
        running(p, **pod_state)
        for r in (replicas if replicas is not None else range(layout.data))
        for p in render_replica(obj.spec, owner, r, layout)
        if p["kind"] == "Pod"
    ]
    services = {s["metadata"]["name"]: s for s in render_services(obj.spec, owner, layout)}
    return Observed(
        pods=pods,
        services=services,
        pdb=render_pdb(obj.spec, owner, layout),
        network_policy=network_policy(obj.spec, owner),
    )


def test_empty_cluster_creates_every_child():
    valid = make(data=2, tensor=8, pipeline=2)
    result = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS)
    kinds = sorted(o["kind"] for o in result.creates)
    assert kinds == ["NetworkPolicy"] + ["Pod"] * 4 + ["PodDisruptionBudget", "Service", "Service"]
    assert result.status["layout"] == {
        "npusPerReplica": 16,
        "podsPerReplica": 2,
        "npusPerPod": 8,
        "totalNpus": 32,
    }
    ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["message"]) == ("False", "0 of 2 replicas ready")


def test_converged_fleet_plans_no_writes_and_a_stable_status():
    valid = make()
    first = plan_pass(valid.obj, valid.layout, fleet(valid), NOW, SETTINGS)
    assert not first.writes_children and not first.events
    settled = make(status=first.status)
    second = plan_pass(settled.obj, settled.layout, fleet(settled), NOW + 60, SETTINGS)
    assert not second.writes_children and not second.events
    assert second.status == first.status  # lastTransitionTime did not move: nothing to write
    assert first.status["readyReplicas"] == 2 and first.status["updatedReplicas"] == 2
    assert first.status["selector"] == f"{names.LABEL_NAME}=llm,{names.LABEL_ROLE}=leader"


def test_failed_rank_recreates_the_whole_gang():
    valid = make(data=1, tensor=8, pipeline=2)
    observed = fleet(valid)
    observed.pods[1] = running(observed.pods[1], ready=False, restarts=1)
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert sorted(d.name for d in result.deletes) == ["llm-0", "llm-0-1"]
    assert [e.reason for e in result.events] == ["ReplicaRestart"]
    assert result.status["groupRestarts"] == [{"replica": 0, "count": 1, "lastTime": rfc3339_ms(NOW)}]


def test_missing_rank_recreates_the_whole_gang():
    valid = make(data=1, tensor=8, pipeline=2)
    observed = fleet(valid)
    del observed.pods[1]
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert [d.name for d in result.deletes] == ["llm-0"]


def progressing(result):
    condition = next(c for c in result.status["conditions"] if c["type"] == "Progressing")
    return condition["status"], condition["reason"]


def test_new_pods_read_as_starting_and_a_restarted_gang_as_recovering():
    valid = make(data=2, tensor=8, pipeline=2)
    starting = plan_pass(valid.obj, valid.layout, fleet(valid, ready=False), NOW, SETTINGS)
    assert progressing(starting) == ("True", "Starting")
    restarted = {"groupRestarts": [{"replica": 1, "count": 1, "lastTime": rfc3339_ms(NOW)}]}
    valid = make(data=2, tensor=8, pipeline=2, status=restarted)
    recovering = plan_pass(valid.obj, valid.layout, fleet(valid, ready=False), NOW + 1, SETTINGS)
    assert progressing(recovering) == ("True", "Recovering")
    converged = plan_pass(valid.obj, valid.layout, fleet(valid), NOW + 1, SETTINGS)
    assert progressing(converged) == ("False", "Converged")


def test_recreation_waits_for_the_backoff():
    restarted = {"groupRestarts": [{"replica": 0, "count": 3, "lastTime": rfc3339(NOW)}]}
    valid = make(data=1, status=restarted)
    services_only = fleet(valid, replicas=[])
    early = plan_pass(valid.obj, valid.layout, services_only, NOW + 10, SETTINGS)
    assert not [o for o in early.creates if o["kind"] == "Pod"]
    assert early.requeue_after == pytest.approx(50)  # third failure: 60 s after the last
    degraded = next(c for c in early.status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True"
    late = plan_pass(valid.obj, valid.layout, services_only, NOW + 61, SETTINGS)
    assert [o["metadata"]["name"] for o in late.creates if o["kind"] == "Pod"] == ["llm-0"]


def test_backoff_doubles_to_the_cap():
    assert [backoff_delay(n, SETTINGS) for n in range(1, 8)] == [0, 30, 60, 120, 240, 480, 600]


def test_scale_in_drains_the_highest_replica_first_then_deletes():
    valid = make(data=1)
    observed = fleet(valid, replicas=[0, 1])
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert [p.name for p in result.patches] == ["llm-1"]
    assert result.patches[0].body["metadata"]["labels"] == {names.LABEL_SERVING: "false"}
    assert not result.deletes
    drained = copy.deepcopy(observed)
    drained.pods[1]["metadata"]["labels"][names.LABEL_SERVING] = "false"
    drained.pods[1]["metadata"]["annotations"] = {
        names.ANNOTATION_DRAIN_STARTED: rfc3339(NOW),
        names.ANNOTATION_DRAIN_REASON: "scale-in",
    }
    waiting = plan_pass(valid.obj, valid.layout, drained, NOW + 10, SETTINGS)
    assert not waiting.deletes and waiting.requeue_after == pytest.approx(20)
    done = plan_pass(valid.obj, valid.layout, drained, NOW + 31, SETTINGS)
    assert [d.name for d in done.deletes] == ["llm-1"]


def test_volcano_pod_groups_come_with_their_gang_and_go_with_it():
    valid = make(data=2, tensor=8, pipeline=2, scheduler="volcano")
    created = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS).creates
    kinds = [o["kind"] for o in created if o["kind"] in ("PodGroup", "Pod")]
    assert kinds == ["PodGroup", "Pod", "Pod"] * 2
    smaller = make(data=1, tensor=8, pipeline=2, scheduler="volcano", drain=0)
    observed = fleet(smaller, replicas=[0, 1])
    observed.pods[2]["metadata"]["labels"][names.LABEL_SERVING] = "false"
    observed.pods[2]["metadata"]["annotations"] = {
        names.ANNOTATION_DRAIN_STARTED: rfc3339(NOW - 5),
        names.ANNOTATION_DRAIN_REASON: "scale-in",
    }
    done = plan_pass(smaller.obj, smaller.layout, observed, NOW, SETTINGS)
    assert [(d.kind, d.name) for d in done.deletes] == [
        ("Pod", "llm-1"),
        ("Pod", "llm-1-1"),
        ("PodGroup", "llm-1"),
    ]
    plain = make(data=1, tensor=8, pipeline=2, drain=0)
    assert all(
        d.kind == "Pod"
        for d in plan_pass(plain.obj, plain.layout, fleet(plain, replicas=[0, 1]), NOW, SETTINGS).deletes
    )


def test_rollout_respects_max_unavailable():
    old = make(data=3)
    observed = fleet(old)
    new = make(data=3, image="engine:v2")
    result = plan_pass(new.obj, new.layout, observed, NOW, SETTINGS)
    assert [p.name for p in result.patches] == ["llm-2"]  # highest index first, one at a time
    assert [e.reason for e in result.events] == ["RolloutStep"]
    wide = make(data=3, image="engine:v2", max_unavailable=2)
    patches = plan_pass(wide.obj, wide.layout, observed, NOW, SETTINGS).patches
    assert [p.name for p in patches if p.kind == "Pod"] == ["llm-2", "llm-1"]


def test_rollout_waits_while_a_replica_is_out_of_service():
    old = make(data=3)
    observed = fleet(old)
    observed.pods[0] = running(observed.pods[0], ready=False)
    new = make(data=3, image="engine:v2")
    result = plan_pass(new.obj, new.layout, observed, NOW, SETTINGS)
    # replica 0 is not serving: it is replaced at once; the budget is spent, the others wait
    assert [d.name for d in result.deletes] == ["llm-0"]
    assert not result.patches


def test_invalid_spec_touches_nothing_and_reports_once():
    doc = {"metadata": {"name": "x", "generation": 2}, "status": {}}
    first = plan_invalid(doc, ["spec.parallelism: tensor 3 does not fit"], NOW)
    assert not first.writes_children
    ready = first.status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert [e.reason for e in first.events] == ["InvalidSpec"]
    again = plan_invalid(
        {**doc, "status": first.status}, ["spec.parallelism: tensor 3 does not fit"], NOW + 5
    )
    assert not again.events and again.status == first.status


def test_drifted_service_is_patched_back():
    valid = make()
    observed = fleet(valid)
    observed.services["llm"]["spec"]["selector"] = {"app": "something-else"}
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert [(p.kind, p.name) for p in result.patches] == [("Service", "llm")]


def test_a_scale_updates_the_pdb():
    before = make(data=2, tensor=8, pipeline=2)  # 2 replicas x 2 pods
    observed = fleet(before)
    after = make(data=3, tensor=8, pipeline=2)
    result = plan_pass(after.obj, after.layout, observed, NOW, SETTINGS)
    (patch,) = [p for p in result.patches if p.kind == "PodDisruptionBudget"]
    assert patch.body["spec"] == {"minAvailable": 5, "selector": {"matchLabels": {names.LABEL_NAME: "llm"}}}
    steady = plan_pass(before.obj, before.layout, observed, NOW, SETTINGS)
    assert not [p for p in steady.patches if p.kind == "PodDisruptionBudget"]


def test_a_pdb_with_max_unavailable_is_replaced_by_min_available():
    valid = make(data=2, tensor=8, pipeline=2)
    observed = fleet(valid)
    observed.pdb = {**observed.pdb, "spec": {"maxUnavailable": 1, **observed.pdb["spec"]}}
    (patch,) = [
        p
        for p in plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS).patches
        if p.kind == "PodDisruptionBudget"
    ]
    # A merge patch: null removes the field, which the API server refuses beside minAvailable.
    assert patch.body["spec"]["maxUnavailable"] is None
    assert patch.body["spec"]["minAvailable"] == 3


def test_unwatched_pod_groups_are_never_waited_on():
    from ascend_fleet.reconcile.expectations import CREATE, Expectation, Expectations

    waiting = Expectations()
    waiting.expect(("ai", "llm"), [Expectation(CREATE, "PodGroup", "llm-0", NOW)])
    assert not waiting.pending(("ai", "llm"), {}, NOW)
    waiting.expect(("ai", "llm"), [Expectation(CREATE, "Pod", "llm-0", NOW)])
    assert waiting.pending(("ai", "llm"), {}, NOW)
