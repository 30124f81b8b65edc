"""The reconciler's bookkeeping for writing the minimum: expectations, Event correlation, refusals, status."""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube.events import EventCache, EventKey, Seen, correlate
from ascend_fleet.reconcile.apply import status_can_wait
from ascend_fleet.reconcile.expectations import (
    CREATE,
    DELETE,
    PATCH,
    Expectation,
    Expectations,
    children_by_name,
)
from ascend_fleet.reconcile.plan import creation_event
from ascend_fleet.reconcile.refusals import Refusal, current, refused_again
from ascend_fleet.status.conditions import CHILD_REJECTED, NAME_CONFLICT
from ascend_fleet.status.derive import canonical_status

KEY = ("default", "llm")


def pod(name: str, version: str = "10", deleting: bool = False) -> dict:
    meta = {"name": name, "resourceVersion": version}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


# ----- expectations -----


def test_a_create_is_pending_until_the_cache_shows_the_child():
    exp = Expectations()
    exp.expect(KEY, [Expectation(CREATE, "Pod", "llm-0", issued=100.0)])
    assert [e.name for e in exp.pending(KEY, {}, now=101.0)] == ["llm-0"]
    assert exp.pending(KEY, {("Pod", "llm-0"): pod("llm-0")}, now=101.5) == []
    assert exp.pending(KEY, {}, now=102.0) == []  # fulfilled expectations are forgotten


def test_a_delete_is_fulfilled_by_the_deletion_timestamp_or_the_childs_absence():
    exp = Expectations()
    exp.expect(KEY, [Expectation(DELETE, "Pod", "a", 0.0), Expectation(DELETE, "Pod", "b", 0.0)])
    cache = {("Pod", "a"): pod("a"), ("Pod", "b"): pod("b")}
    assert len(exp.pending(KEY, cache, 1.0)) == 2
    cache[("Pod", "a")] = pod("a", deleting=True)
    assert [e.name for e in exp.pending(KEY, cache, 1.0)] == ["b"]
    del cache[("Pod", "b")]
    assert exp.pending(KEY, cache, 1.0) == []


def test_a_patch_is_fulfilled_once_the_cache_has_its_resource_version():
    exp = Expectations()
    exp.expect(KEY, [Expectation(PATCH, "Pod", "a", 0.0, version="12")])
    assert exp.pending(KEY, {("Pod", "a"): pod("a", "11")}, 1.0)
    assert not exp.pending(KEY, {("Pod", "a"): pod("a", "12")}, 1.0)
    exp.expect(KEY, [Expectation(PATCH, "Pod", "a", 0.0, version="12")])
    assert not exp.pending(KEY, {}, 1.0)  # patched, then gone: nothing to wait for


def test_expectations_expire_so_a_lost_watch_event_cannot_stall_an_object():
    exp = Expectations(ttl=60.0)
    exp.expect(KEY, [Expectation(CREATE, "Pod", "llm-0", issued=100.0)])
    assert exp.wait_hint(KEY, now=130.0) == pytest.approx(30.0)
    assert exp.pending(KEY, {}, now=159.0)
    assert exp.pending(KEY, {}, now=160.5) == []
    assert exp.wait_hint(KEY, now=161.0) is None


def test_expectations_are_per_object_and_a_later_write_replaces_an_earlier_one():
    exp = Expectations()
    exp.expect(KEY, [Expectation(PATCH, "Pod", "a", 0.0, version="5")])
    exp.expect(KEY, [Expectation(DELETE, "Pod", "a", 1.0)])
    exp.expect(("default", "other"), [Expectation(CREATE, "Pod", "a", 1.0)])
    (only,) = exp.pending(KEY, {("Pod", "a"): pod("a", "9")}, 2.0)
    assert only.op == DELETE
    exp.forget(KEY)
    assert exp.pending(KEY, {}, 2.0) == []
    assert exp.pending(("default", "other"), {}, 2.0)


def test_the_cache_view_keys_children_by_kind_and_name():
    view = children_by_name([pod("p")], [{"metadata": {"name": "s"}}], [{"metadata": {"name": "s"}}])
    assert set(view) == {("Pod", "p"), ("Service", "s"), ("PodDisruptionBudget", "s")}


# ----- Event correlation -----


def key(message: str = "m") -> EventKey:
    return EventKey(
        "ascend-fleet",
        names.API_VERSION,
        names.KIND,
        "default",
        "llm",
        "uid-1",
        "Warning",
        "ChildRejected",
        message,
    )


def test_a_new_event_is_posted_and_a_repeat_within_the_window_counts_up():
    assert correlate(None, now=10.0) == correlate(None, now=99.0)
    first = correlate(None, now=10.0)
    assert (first.patch_name, first.count) == (None, 1)
    again = correlate(Seen("llm.abc", 1, "2026-01-01T00:00:00Z", at=10.0), now=20.0, window=600.0)
    assert (again.patch_name, again.count, again.first) == ("llm.abc", 2, "2026-01-01T00:00:00Z")


def test_a_repeat_after_the_window_is_a_new_event():
    stale = correlate(Seen("llm.abc", 7, "t", at=10.0), now=700.0, window=600.0)
    assert (stale.patch_name, stale.count) == (None, 1)


def test_the_event_cache_keys_on_the_message_and_evicts_the_least_recent():
    cache = EventCache(size=2)
    cache.remember(key("a"), Seen("e-a", 1, "t", 0.0))
    cache.remember(key("b"), Seen("e-b", 3, "t", 0.0))
    assert cache.decide(key("b"), 1.0).count == 4
    assert cache.decide(key("c"), 1.0).count == 1  # another message: another Event
    cache.remember(key("a"), Seen("e-a", 2, "t", 1.0))  # "a" is now the most recent
    cache.remember(key("c"), Seen("e-c", 1, "t", 1.0))
    assert len(cache) == 2
    assert cache.decide(key("b"), 2.0).patch_name is None  # evicted
    assert cache.decide(key("a"), 2.0).patch_name == "e-a"


# ----- refusals -----


def test_refusals_count_up_and_back_off_doubling_to_the_cap():
    first = refused_again(None, "Pod", "llm-0", CHILD_REJECTED, "Forbidden: quota", now=100.0, generation=1)
    assert first.count == 1 and first.retry_at(2.0, 8.0) == 102.0
    second = refused_again(first, "Pod", "llm-0", CHILD_REJECTED, "Forbidden: quota", now=102.0, generation=1)
    assert second.count == 2 and second.retry_at(2.0, 8.0) == 106.0
    third = refused_again(second, "Pod", "llm-0", CHILD_REJECTED, "Forbidden: quota", now=106.0, generation=1)
    fourth = refused_again(third, "Pod", "llm-0", CHILD_REJECTED, "Forbidden: quota", now=114.0, generation=1)
    assert fourth.retry_at(2.0, 8.0) == 122.0  # capped
    other = refused_again(fourth, "Pod", "llm-0", CHILD_REJECTED, "Invalid: shm", now=120.0, generation=1)
    assert other.count == 1  # a different answer starts afresh


def test_a_refusal_stands_until_the_spec_changes_or_the_child_is_ours():
    refusal = Refusal("Service", "llm", NAME_CONFLICT, "controlled by Deployment web", 3, 0.0, generation=2)
    refusals = {("Service", "llm"): refusal}
    assert current(refusals, 2, owned=set()) == refusals
    assert current(refusals, 3, owned=set()) == {}
    assert current(refusals, 2, owned={("Service", "llm")}) == {}


def test_refusal_sentences_name_the_child_and_say_what_to_do():
    conflict = Refusal("Service", "llm", NAME_CONFLICT, "controlled by Deployment web", 1, 0.0)
    assert conflict.sentence() == (
        "Service llm already exists and is not owned by this AscendInference "
        "(controlled by Deployment web); it is left alone: delete or rename it, "
        "or rename this object"
    )
    rejected = Refusal("Pod", "llm-0", CHILD_REJECTED, "Invalid: spec.volumes[0]: bad", 1, 0.0)
    assert rejected.sentence() == "the API server refused Pod llm-0: Invalid: spec.volumes[0]: bad"


# ----- creation Events and status writes -----


def child(kind: str, name: str, replica: int | None = None, revision: str = "r1") -> dict:
    labels = {} if replica is None else {names.LABEL_REPLICA: str(replica), names.LABEL_REVISION: revision}
    return {"kind": kind, "metadata": {"name": name, "labels": labels}}


def test_one_creation_event_reports_everything_a_pass_created():
    event = creation_event(
        [
            child("Service", "llm"),
            child("Pod", "llm-0", 0),
            child("Pod", "llm-1", 1),
            child("PodDisruptionBudget", "llm"),
        ]
    )
    assert (event.type, event.reason) == ("Normal", "CreatedReplica")
    assert (
        event.message
        == "created replicas 0, 1 (1 pod each, revision r1); Service llm, PodDisruptionBudget llm"
    )
    gang = creation_event([child("Pod", "llm-2-0", 2), child("Pod", "llm-2-1", 2)])
    assert gang.message == "created replica 2 (2 pods, revision r1)"
    assert creation_event([child("Service", "llm-pods")]).reason == "Created"
    assert creation_event([]) is None


def status(
    ready: str = "False",
    reason: str = "ReplicasNotReady",
    restarts: list | None = None,
    degraded: str = "False",
) -> dict:
    return {
        "conditions": [
            {"type": "Ready", "status": ready, "reason": reason},
            {"type": "Degraded", "status": degraded, "reason": "x"},
        ],
        "groupRestarts": restarts or [],
    }


def test_a_start_up_status_waits_right_after_creates_but_ready_never_waits():
    assert status_can_wait({}, status(), created=True, urgent=False)
    assert not status_can_wait({}, status(), created=False, urgent=False)
    assert not status_can_wait({}, status("True", "AllReplicasReady"), created=True, urgent=False)
    assert not status_can_wait({}, status(), created=True, urgent=True)  # deletes or refusals in this pass
    assert not status_can_wait({}, status(restarts=[{"replica": 0, "count": 1}]), created=True, urgent=False)
    assert not status_can_wait(status(), status(degraded="True"), created=True, urgent=False)
    assert not status_can_wait({}, status(reason="InvalidSpec"), created=True, urgent=False)


def test_the_stored_status_compares_in_the_form_the_operator_writes():
    written = {
        "observedGeneration": 1,
        "replicas": 2,
        "readyReplicas": 2,
        "updatedReplicas": 2,
        "selector": "a=b",
        "revision": "r",
        "conditions": [],
        "actions": [],
        "groupRestarts": [],
    }
    assert canonical_status(written) == written
    assert canonical_status({"replicas": 2})["selector"] == ""  # defaults filled in, as they are written
    assert canonical_status({"replicas": "many"}) == {}  # unreadable: compares unequal, so it is rewritten


def test_writes_to_kinds_the_cache_does_not_hold_are_not_waited_for():
    from ascend_fleet.reconcile.expectations import CREATE, Expectation, Expectations

    expectations = Expectations()
    key = ("ai", "llm")
    expectations.expect(
        key, [Expectation(CREATE, "PodGroup", "llm-0", 100.0), Expectation(CREATE, "Pod", "llm-0", 100.0)]
    )
    pending = expectations.pending(key, {}, 101.0)
    assert [(e.kind, e.name) for e in pending] == [("Pod", "llm-0")]
    assert expectations.pending(key, {("Pod", "llm-0"): {"metadata": {"name": "llm-0"}}}, 101.0) == []
