"""Reading objects and pods into the evaluator's values, and keeping status.actions bounded."""

from __future__ import annotations

import copy

from ascend_fleet.api.times import rfc3339
from ascend_fleet.api.v1alpha1 import ActionRecord, Autoscaling
from ascend_fleet.control.model import ControlDecision
from ascend_fleet.control.state import action_record, fleet_state, updated_actions
from ascend_fleet.render import Owner, drain_patch, render_replica, validate
from tests.support.documents import inference

NOW = 1_700_000_000.0


def _doc() -> dict:
    actions = [
        {"time": rfc3339(NOW - 5), "rule": "r", "action": "restart_service", "target": "replica-1"},
        {"time": rfc3339(NOW - 50), "rule": "r", "action": "scale_up", "target": "fleet", "dryRun": True},
    ]
    return (
        inference("qwen", "qwen", "/models/q")
        .namespace("team-a")
        .uid("u1")
        .engine("vllm-ascend")
        .parallelism(tensor=8, pipeline=2, data=3)
        .status({"actions": actions})
        .build()
    )


def _running(pod: dict, ready_at: float) -> dict:
    pod["status"] = {
        "phase": "Running",
        "startTime": rfc3339(ready_at - 10),
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(ready_at)}],
    }
    return pod


def test_fleet_state_reads_replicas_from_rendered_pods():
    valid = validate(_doc())
    owner = Owner.of(valid.obj)
    pods = []
    for replica in range(2):  # replica 2 is missing
        pods += [
            _running(p, NOW - 100 - replica)
            for p in render_replica(valid.obj.spec, owner, replica, valid.layout)
        ]
    leader_1 = next(p for p in pods if p["metadata"]["name"] == "qwen-1")
    patch = drain_patch(rfc3339(NOW - 1), "rule restart")["metadata"]
    leader_1["metadata"]["labels"].update(patch["labels"])
    leader_1["metadata"].setdefault("annotations", {}).update(patch["annotations"])

    state = fleet_state(valid, pods)
    assert (state.replicas, state.max_unavailable) == (3, 1)
    assert set(state.replica_states) == {0, 1}
    zero, one = state.replica_states[0], state.replica_states[1]
    assert zero.ready and not zero.draining and zero.leader == "qwen-0" and zero.serving_since == NOW - 100
    assert one.draining and not one.ready
    assert state.unavailable() == 2  # draining replica 1, missing replica 2
    assert [(a.action, a.target, a.dry_run) for a in state.actions] == [
        ("restart_service", "replica-1", False),
        ("scale_up", "fleet", True),
    ]


def test_a_replica_without_a_ready_time_counts_as_serving_long_ago():
    valid = validate(_doc())
    pods = render_replica(valid.obj.spec, Owner.of(valid.obj), 0, valid.layout)
    assert fleet_state(valid, pods).replica_states[0].serving_since is None


def test_action_records_are_the_status_shape():
    decision = ControlDecision(
        "team-a",
        "qwen",
        "rule",
        "npu_utilization",
        0.912345678,
        "scale_up",
        "fleet",
        replicas_from=2,
        replicas_to=3,
    )
    record = action_record(decision, NOW)
    assert record == {
        "time": rfc3339(NOW),
        "rule": "rule",
        "metric": "npu_utilization",
        "value": 0.912346,
        "action": "scale_up",
        "target": "fleet",
        "result": "replicas 2 -> 3",
        "dryRun": False,
    }
    ActionRecord.model_validate(record)  # the status model reads it back


def _record(age: float, action: str = "notify", target: str = "fleet") -> dict:
    return {"time": rfc3339(NOW - age), "rule": "r", "action": action, "target": target, "dryRun": False}


def test_history_is_bounded_newest_first_but_keeps_running_cooldowns():
    autoscaling = Autoscaling(scale_up_cooldown=60, scale_down_cooldown=60, restart_cooldown=600)
    old = [_record(age) for age in range(10, 20)]
    kept = updated_actions(
        [*old[:6], _record(30, "restart_service", "replica-2"), *old[6:]], [_record(0)], 5, autoscaling, NOW
    )
    assert kept[0] == _record(0)
    assert len(kept) == 6 and kept[-1]["target"] == "replica-2"  # its restart cooldown still runs
    expired = updated_actions(
        [*old, _record(700, "restart_service", "replica-2")], [_record(0)], 5, autoscaling, NOW
    )
    assert len(expired) == 5


def test_the_loop_parses_an_object_again_only_when_its_resource_version_moves(monkeypatch):
    import ascend_fleet.control.loop as loop_module
    from ascend_fleet.api.settings import OperatorSettings

    parsed = []

    def counting_validate(doc, **kwargs):
        parsed.append(doc["metadata"]["resourceVersion"])
        return validate(doc, **kwargs)

    monkeypatch.setattr(loop_module, "validate", counting_validate)
    settings = OperatorSettings.model_validate({"prometheus": {"url": "http://prometheus.invalid"}})
    loop = loop_module.ControlLoop(settings, kube=None, prometheus=object())
    doc = {**_doc(), "metadata": {**_doc()["metadata"], "resourceVersion": "7"}}
    valid = validate(doc)
    pods = render_replica(valid.obj.spec, Owner.of(valid.obj), 0, valid.layout)
    key = ("team-a", "qwen")

    first = loop.states([doc], {key: [_running(copy.deepcopy(p), NOW - 100) for p in pods]})
    again = loop.states([doc], {key: pods})  # same object, its pods no longer Ready
    assert parsed == ["7"]  # parsed once
    assert first[0][1].replica_states[0].ready and not again[0][1].replica_states[0].ready  # pods are fresh
    assert again[0][1].actions == first[0][1].actions == fleet_state(valid, pods).actions

    newer = {**doc, "metadata": {**doc["metadata"], "resourceVersion": "8"}, "status": {}}
    assert loop.states([newer], {key: pods})[0][1].actions == ()  # the new status is read
    assert parsed == ["7", "8"]
    loop.states([], {})  # the object is gone: forgotten
    loop.states([newer], {key: pods})
    assert parsed == ["7", "8", "8"]


def test_a_replicas_domain_is_its_leaders_node_or_zone_under_spec_availability():
    def state(spread: str | None) -> dict:
        doc = (
            inference("qwen", "qwen", "/models/q")
            .namespace("team-a")
            .uid("u1")
            .engine("vllm-ascend")
            .parallelism(tensor=8, pipeline=2, data=2)
        )
        if spread:
            doc = doc.spec(availability={"spread": spread})
        valid = validate(doc.build())
        pods = []
        for replica, (node, zone) in enumerate((("n1", "z1"), ("n2", None))):
            for pod in render_replica(valid.obj.spec, Owner.of(valid.obj), replica, valid.layout):
                pod["spec"]["nodeName"] = node
                if zone:
                    pod["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
                pods.append(_running(pod, NOW - 100))
        return {i: r.domain for i, r in fleet_state(valid, pods).replica_states.items()}

    assert state("node") == {0: "n1", 1: "n2"}
    assert state("zone") == {0: "z1", 1: None}  # no zone label on the pod: not known
    assert state(None) == {0: None, 1: None}
