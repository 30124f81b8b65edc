"""The reconciler's pure plan for a two-role fleet (spec.disaggregation): each role's gangs planned with its own
layout, status per role, Ready only when both roles are, and pods of the other shape collected."""

from __future__ import annotations

import copy

from ascend_fleet.api import names
from ascend_fleet.api.settings import ReconcileSettings
from ascend_fleet.api.times import rfc3339_ms
from ascend_fleet.observed import observed_replicas
from ascend_fleet.reconcile.plan import creation_event, may_roll_out, plan_pass
from ascend_fleet.reconcile.writes import Observed
from ascend_fleet.render import Owner, network_policy, render_pdb, render_replica, render_services, validate
from ascend_fleet.render.children import revision
from tests.support.documents import inference
from tests.unit.test_reconcile_plan import running

NOW = 1_800_000_000.0
SETTINGS = ReconcileSettings(backoff_initial=30, backoff_max=600)


def make(prefill=None, decode=None, status=None, scheduler=None, image="engine:v1"):
    doc = (
        inference("pd")
        .namespace("ai")
        .uid("uid-1")
        .generation(2)
        .engine("vllm-ascend", image=image)
        .section("disruption", maxUnavailable=1, drainSeconds=30)
        .merge(
            disaggregation={
                "prefill": {"parallelism": prefill or {"tensor": 4}},
                "decode": {"parallelism": decode or {"tensor": 2, "data": 2}},
            }
        )
    )
    if scheduler:
        doc.section("scheduling", schedulerName=scheduler)
    if status:
        doc.status(status)
    return validate(doc.build())


def role_pods(valid, role, replicas, **state):
    owner = Owner.of(valid.obj)
    return [
        running(p, **state)
        for r in replicas
        for p in render_replica(valid.obj.spec, owner, r, rev=revision(valid.obj.spec, "pd"), role=role)
        if p["kind"] == "Pod"
    ]


def cluster(valid, pods):
    owner = Owner.of(valid.obj)
    services = {s["metadata"]["name"]: s for s in render_services(valid.obj.spec, owner)}
    return Observed(
        pods=pods,
        services=services,
        pdb=render_pdb(valid.obj.spec, owner),
        network_policy=network_policy(valid.obj.spec, owner),
    )


def condition(result, kind="Ready"):
    return next(c for c in result.status["conditions"] if c["type"] == kind)


def test_an_empty_cluster_gets_both_roles_pods_with_their_labels():
    valid = make()
    result = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS)
    pods = {o["metadata"]["name"]: o for o in result.creates if o["kind"] == "Pod"}
    assert sorted(pods) == ["pd-decode-0", "pd-decode-1", "pd-prefill-0"]
    for name, pod in pods.items():
        labels = pod["metadata"]["labels"]
        role = name.split("-")[1]
        assert labels[names.LABEL_PD_ROLE] == labels[names.LABEL_LLMD_ROLE] == role
    npus = {
        n: p["spec"]["containers"][0]["resources"]["requests"]["huawei.com/Ascend910"]
        for n, p in pods.items()
    }
    assert npus == {"pd-prefill-0": "4", "pd-decode-0": "2", "pd-decode-1": "2"}  # each role's own layout
    kinds = sorted(o["kind"] for o in result.creates if o["kind"] != "Pod")
    assert kinds == ["NetworkPolicy", "PodDisruptionBudget", "Service", "Service"]
    assert result.status["roles"] == {
        "prefill": {
            "replicas": 0,
            "readyReplicas": 0,
            "updatedReplicas": 0,
            "layout": {"npusPerReplica": 4, "podsPerReplica": 1, "npusPerPod": 4, "totalNpus": 4},
        },
        "decode": {
            "replicas": 0,
            "readyReplicas": 0,
            "updatedReplicas": 0,
            "layout": {"npusPerReplica": 2, "podsPerReplica": 1, "npusPerPod": 2, "totalNpus": 4},
        },
    }
    assert "layout" not in result.status  # one layout per role, not one for the fleet
    assert condition(result)["message"] == "0 of 3 replicas ready (prefill 0 of 1, decode 0 of 2)"
    event = creation_event(result.creates)
    assert event is not None and "replicas decode 0, decode 1, prefill 0 (1 pod each" in event.message


def test_ready_only_when_both_roles_are_and_then_nothing_to_write():
    valid = make()
    decode_only = plan_pass(
        valid.obj, valid.layout, cluster(valid, role_pods(valid, "decode", [0, 1])), NOW, SETTINGS
    )
    assert [p["metadata"]["name"] for p in decode_only.creates] == ["pd-prefill-0"]
    assert condition(decode_only)["status"] == "False"
    assert decode_only.status["roles"]["decode"]["readyReplicas"] == 2
    assert decode_only.status["roles"]["prefill"]["readyReplicas"] == 0

    pods = role_pods(valid, "prefill", [0]) + role_pods(valid, "decode", [0, 1])
    both = plan_pass(valid.obj, valid.layout, cluster(valid, pods), NOW, SETTINGS)
    assert not both.writes_children
    ready = condition(both)
    assert (ready["status"], ready["reason"]) == ("True", "AllReplicasReady")
    assert ready["message"] == "3 of 3 replicas ready (prefill 1 of 1, decode 2 of 2)"
    assert (both.status["replicas"], both.status["readyReplicas"]) == (3, 3)
    settled = make(status=both.status)
    again = plan_pass(settled.obj, settled.layout, cluster(settled, pods), NOW + 60, SETTINGS)
    assert again.status == both.status and not again.writes_children and not again.events


def test_a_failed_prefill_pod_restarts_its_own_gang_only():
    valid = make()
    pods = role_pods(valid, "prefill", [0], restarts=1) + role_pods(valid, "decode", [0, 1])
    result = plan_pass(valid.obj, valid.layout, cluster(valid, pods), NOW, SETTINGS)
    assert [d.name for d in result.deletes] == ["pd-prefill-0"]
    assert result.events[0].message.startswith("prefill replica 0: pd-prefill-0 failed")
    assert result.status["groupRestarts"] == [
        {"replica": 0, "role": "prefill", "count": 1, "lastTime": rfc3339_ms(NOW)}
    ]
    # The record is the prefill replica's: decode replica 0 keeps serving and has no backoff.
    later = make(status=result.status)
    pods = role_pods(later, "decode", [0, 1])
    second = plan_pass(later.obj, later.layout, cluster(later, pods), NOW + 1, SETTINGS)
    assert [p["metadata"]["name"] for p in second.creates] == ["pd-prefill-0"]


def touched(result):
    """The names of the pods a pass writes to, deletes or creates."""
    return {w.name for w in [*result.patches, *result.deletes] if w.kind == "Pod"} | {
        o["metadata"]["name"] for o in result.creates if o["kind"] == "Pod"
    }


def in_service(valid, pod):
    """Whether the fleet's Service (the request entry: decode leaders that serve) selects ``pod``."""
    service = next(
        s for s in render_services(valid.obj.spec, Owner.of(valid.obj)) if s["metadata"]["name"] == "pd"
    )
    labels = pod["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def test_a_prefill_gang_restart_leaves_its_decode_peers_serving_throughout():
    """Failed, deleted, recreated, booting, failed again and held back: at no pass is a decode pod drained,
    deleted or replaced, so the decode leaders stay in the Service and the decode role stays ready."""
    valid = make(prefill={"tensor": 8, "pipeline": 2})  # a two-pod prefill gang: one rank fails, both go
    decode = role_pods(valid, "decode", [0, 1])
    assert all(in_service(valid, p) for p in decode)  # no write below touches them, so they stay selected
    gang = role_pods(valid, "prefill", [0])
    failed = [gang[0], running(gang[1], restarts=1)]
    going = [deleting(p) for p in failed]
    booting = [running(p, ready=False) for p in gang]
    steps = [  # (what the prefill gang is, its pods, when, the prefill pods the pass writes to)
        ("a rank failed", failed, NOW, ["pd-prefill-0", "pd-prefill-0-1"]),
        ("the gang going", going, NOW + 1, []),
        ("the gang gone", [], NOW + 2, ["pd-prefill-0", "pd-prefill-0-1"]),  # the first restart: no backoff
        ("the new gang booting", booting, NOW + 3, []),
        ("a rank failed again", failed, NOW + 60, ["pd-prefill-0", "pd-prefill-0-1"]),
        ("gone, in its backoff", [], NOW + 61, []),  # the second restart waits 30 s: no prefill at all
    ]
    status = None
    for step, prefill, now, written in steps:
        current = make(prefill={"tensor": 8, "pipeline": 2}, status=status)
        result = plan_pass(current.obj, current.layout, cluster(current, prefill + decode), now, SETTINGS)
        assert sorted(touched(result)) == written, step  # prefill pods only, never a decode one
        assert not [w for w in [*result.patches, *result.deletes] if w.kind != "Pod"], (
            step
        )  # Service, PDB kept
        assert result.status["roles"]["decode"]["readyReplicas"] == 2, step
        assert not [e for e in result.events if "decode" in e.message], step
        assert condition(result)["status"] == "False", step  # the fleet is not Ready, yet decode serves
        status = result.status
    assert status["groupRestarts"] == [
        {"replica": 0, "role": "prefill", "count": 2, "lastTime": rfc3339_ms(NOW + 60)}
    ]


def test_scaling_one_role_in_drains_that_role():
    valid = make(decode={"tensor": 2, "data": 1})
    pods = role_pods(valid, "prefill", [0]) + role_pods(valid, "decode", [0, 1])
    result = plan_pass(valid.obj, valid.layout, cluster(valid, pods), NOW, SETTINGS)
    assert [p.name for p in result.patches] == ["pd-decode-1"]
    assert result.patches[0].body["metadata"]["labels"][names.LABEL_SERVING] == "false"
    assert "decode replica 1: left the Service" in result.events[0].message


def test_pods_of_the_other_shape_are_collected():
    valid = make()
    colocated = validate(
        inference("pd").namespace("ai").uid("uid-1").engine("vllm-ascend", image="e").build()
    )
    stray = [
        running(p)
        for p in render_replica(colocated.obj.spec, Owner.of(colocated.obj), 0, colocated.layout)
        if p["kind"] == "Pod"
    ]
    pods = stray + role_pods(valid, "prefill", [0]) + role_pods(valid, "decode", [0, 1])
    result = plan_pass(valid.obj, valid.layout, cluster(valid, pods), NOW, SETTINGS)
    assert [p.name for p in result.patches] == ["pd-0"]  # drained first, as any scale-in
    assert result.status["roles"]["decode"]["readyReplicas"] == 2

    # And the other way round: a fleet that drops spec.disaggregation collects its role pods.
    back = plan_pass(colocated.obj, colocated.layout, cluster(colocated, copy.deepcopy(pods)), NOW, SETTINGS)
    assert sorted(p.name for p in back.patches) == ["pd-decode-0", "pd-decode-1", "pd-prefill-0"]
    assert "roles" not in back.status


def test_volcano_groups_are_named_and_collected_per_role():
    valid = make(scheduler=names.VOLCANO_SCHEDULER)
    created = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS).creates
    groups = sorted(o["metadata"]["name"] for o in created if o["kind"] == names.POD_GROUP_KIND)
    assert groups == ["pd-decode-0", "pd-decode-1", "pd-prefill-0"]
    pods = role_pods(valid, "prefill", [0], restarts=1) + role_pods(valid, "decode", [0, 1])
    result = plan_pass(valid.obj, valid.layout, cluster(valid, pods), NOW, SETTINGS)
    assert sorted(d.name for d in result.deletes if d.kind == names.POD_GROUP_KIND) == ["pd-prefill-0"]


def drained(pod, started=NOW - 5):
    """``pod`` as the reconciler's drain patch leaves it: out of the Service, its in-flight requests finishing."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"][names.LABEL_SERVING] = "false"
    pod["metadata"].setdefault("annotations", {}).update(
        {names.ANNOTATION_DRAIN_STARTED: rfc3339_ms(started), names.ANNOTATION_DRAIN_REASON: "rollout"}
    )
    return pod


def deleting(pod):
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = rfc3339_ms(NOW - 1)
    return pod


def names_of(writes):
    return sorted(w.name for w in writes)


def test_a_rollout_drains_decode_first_and_keeps_the_old_prefill_serving():
    old, new = make(), make(image="engine:v2")
    pods = role_pods(old, "prefill", [0]) + role_pods(old, "decode", [0, 1])
    result = plan_pass(new.obj, new.layout, cluster(new, pods), NOW, SETTINGS)
    # maxUnavailable 1 per role, yet only decode moves: the old prefill is the old decode replicas' peer.
    assert names_of(result.patches) == ["pd-decode-1"]
    assert not result.deletes
    assert condition(result, "Progressing")["reason"] == "RollingUpdate"
    assert result.requeue_after is not None


def test_the_old_prefill_waits_for_every_old_decode_including_a_draining_one():
    old, new = make(), make(image="engine:v2")
    prefill = role_pods(old, "prefill", [0])
    # Decode 1 already replaced; decode 0 of the old revision drains (its requests may still read KV).
    decode = [drained(p) for p in role_pods(old, "decode", [0])] + role_pods(new, "decode", [1])
    result = plan_pass(new.obj, new.layout, cluster(new, prefill + decode), NOW, SETTINGS)
    assert not result.patches and not result.deletes  # decode 0 has 25 s of its drain left
    # Its drain over, decode 0 is deleted; the prefill still waits for the pod to go.
    later = plan_pass(new.obj, new.layout, cluster(new, prefill + decode), NOW + 30, SETTINGS)
    assert names_of(later.deletes) == ["pd-decode-0"]
    assert not later.patches
    going = [deleting(p) for p in role_pods(old, "decode", [0])] + role_pods(new, "decode", [1])
    gone = plan_pass(new.obj, new.layout, cluster(new, prefill + going), NOW + 31, SETTINGS)
    assert names_of(gone.patches) == ["pd-prefill-0"]
    assert gone.patches[0].body["metadata"]["annotations"][names.ANNOTATION_DRAIN_REASON] == "rollout"


def test_once_decode_is_at_the_new_revision_the_prefill_rolls_within_its_budget():
    old, new = (
        make(prefill={"tensor": 4, "data": 2}),
        make(prefill={"tensor": 4, "data": 2}, image="engine:v2"),
    )
    pods = role_pods(old, "prefill", [0, 1]) + role_pods(new, "decode", [0, 1])
    result = plan_pass(new.obj, new.layout, cluster(new, pods), NOW, SETTINGS)
    assert names_of(result.patches) == ["pd-prefill-1"]  # the highest first, one at a time


def test_an_old_decode_that_does_not_serve_holds_no_prefill_back():
    old, new = make(), make(image="engine:v2")
    prefill = role_pods(old, "prefill", [0])
    # Decode 0 of the old revision is not Ready (no request reaches it): it is replaced at once, and it is no
    # prefill pod's peer, so the old prefill may roll in the same pass.
    decode = role_pods(old, "decode", [0], ready=False) + role_pods(new, "decode", [1])
    result = plan_pass(new.obj, new.layout, cluster(new, prefill + decode), NOW, SETTINGS)
    assert names_of(result.deletes) == ["pd-decode-0"]
    assert names_of(result.patches) == ["pd-prefill-0"]


def test_a_prefill_that_does_not_serve_is_replaced_while_decode_rolls():
    old, new = make(), make(image="engine:v2")
    pods = role_pods(old, "prefill", [0], ready=False) + role_pods(old, "decode", [0, 1])
    result = plan_pass(new.obj, new.layout, cluster(new, pods), NOW, SETTINGS)
    # Not Ready, the old prefill is nobody's peer: replacing it costs nothing, as in any rollout.
    assert names_of(result.deletes) == ["pd-prefill-0"]
    assert names_of(result.patches) == ["pd-decode-1"]


def test_may_roll_out_holds_back_only_prefill_and_only_behind_older_serving_decode():
    old, new = make(), make(image="engine:v2")
    rev = revision(new.obj.spec, "pd")

    def replicas(decode):
        return {"decode": observed_replicas(decode, "decode"), "prefill": {}}

    old_decode = role_pods(old, "decode", [0])
    assert may_roll_out("prefill", replicas(old_decode), rev) is False
    assert may_roll_out("prefill", replicas([drained(p) for p in old_decode]), rev) is False
    assert may_roll_out("prefill", replicas([deleting(p) for p in old_decode]), rev) is True
    assert may_roll_out("prefill", replicas(role_pods(old, "decode", [0], ready=False)), rev) is True
    assert may_roll_out("prefill", replicas(role_pods(new, "decode", [0, 1])), rev) is True
    assert may_roll_out("prefill", {"prefill": {}}, rev) is True  # no decode role at all
    assert may_roll_out("decode", replicas(old_decode), rev) is True
    assert may_roll_out(None, replicas(old_decode), rev) is True
