"""Children the API server will not create: a foreign object holding the name, a create refused outright.

Both must end in a ``Ready=False`` condition that names the child and quotes the reason, Events
counted up rather than repeated, retries with backoff rather than hot, and the foreign object untouched.
"""

from __future__ import annotations

import time

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from tests.e2e.fleet import example

pytestmark = pytest.mark.e2e

NAME = "qwen-1-5b"


def created_items(fleet) -> list[str]:
    """Every child the operator's creation Events report, e.g. ``Service qwen-1-5b``."""
    items = []
    for event in fleet.events():
        if event.get("reason") in ("Created", "CreatedReplica"):
            for part in event["message"].removeprefix("created ").split("; "):
                items += [item.strip() for item in part.split(", ")]
    return items


def ready_condition(fleet, reason: str) -> dict | None:
    condition = fleet.condition(NAME, "Ready")
    return condition if condition.get("reason") == reason else None


def test_a_foreign_service_holding_a_childs_name_is_reported_and_never_touched(fleet, kube):
    foreign = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": fleet.namespace, "labels": {"team": "someone-else"}},
            "spec": {"selector": {"app": "other"}, "ports": [{"port": 8080, "targetPort": 8080}]},
        }
    )
    fleet.apply(example("sglang-small.yaml"))

    condition = wait_for(lambda: ready_condition(fleet, "NameConflict"), 20, "Ready=False/NameConflict")
    assert condition["status"] == "False"
    assert f"Service {NAME} already exists and is not owned by this AscendInference" in condition["message"]
    # The other children are created as usual; the conflicting one is not reported as created.
    wait_for(lambda: fleet.pod_names(NAME) == [f"{NAME}-0"], 20, "the engine pod")
    assert f"Service {NAME}-pods" in created_items(fleet)
    assert f"Service {NAME}" not in created_items(fleet)

    time.sleep(5)  # retries run meanwhile (backoff 2 s, 4 s with the suite's timers)
    (warning,) = fleet.events("NameConflict")
    assert warning["type"] == "Warning" and f"Service {NAME}" in warning["message"]
    # One Event counted up, a handful of retries: not a hot loop.
    assert 2 <= warning.get("count", 1) <= 4, warning.get("count")
    now = kube.get("Service", fleet.namespace, NAME)
    assert now["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    assert not now["metadata"].get("ownerReferences") and now["metadata"]["labels"] == {
        "team": "someone-else"
    }

    # Once the name is free, the next retry creates the operator's own Service.
    kube.delete("Service", fleet.namespace, NAME)
    ours = wait_for(
        lambda: kube.get("Service", fleet.namespace, NAME)["metadata"].get("ownerReferences"),
        30,
        "the operator's own Service",
    )
    assert [(r["kind"], r["controller"]) for r in ours] == [(names.KIND, True)]
    wait_for(lambda: fleet.condition(NAME, "Ready").get("status") == "True", 10, "Ready=True")
    assert f"Service {NAME}" in created_items(fleet)


def test_a_refused_pod_create_is_reported_with_backoff(fleet, kube):
    # A quota of no pods: the API server's ResourceQuota admission refuses every pod create (403).
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods", "namespace": fleet.namespace},
        "spec": {"hard": {"pods": "0"}},
    }
    kube.create(quota, exist_ok=False)
    fleet.apply(example("sglang-small.yaml"))

    condition = wait_for(lambda: ready_condition(fleet, "ChildRejected"), 20, "Ready=False/ChildRejected")
    assert condition["status"] == "False"
    assert f"the API server refused Pod {NAME}-0: Forbidden: " in condition["message"]
    assert "forbidden" in condition["message"] and "no-pods" in condition["message"]
    warning = wait_for(
        lambda: [e for e in fleet.events("ChildRejected") if e.get("count", 1) >= 2],
        20,
        "a second, counted-up refusal",
    )[0]
    assert warning["type"] == "Warning" and "no-pods" in warning["message"]
    assert len(fleet.events("ChildRejected")) == 1  # the same refusal, counted: not a new Event each time
    assert fleet.pod_names(NAME) == []
    kube.delete("ResourceQuota", fleet.namespace, "no-pods")
    fleet.wait_ready(NAME, 1, timeout=40)
    assert fleet.condition(NAME, "Ready")["reason"] == "AllReplicasReady"
    revision = fleet.get(NAME)["status"]["revision"]
    reports = [
        e for e in fleet.events("CreatedReplica") if f"replica 0 (1 pod, revision {revision})" in e["message"]
    ]
    assert len(reports) == 1 and reports[0].get("count", 1) == 1  # created once, reported once
