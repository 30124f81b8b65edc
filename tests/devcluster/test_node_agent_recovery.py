"""The node agent's pure parts for coming back from an outage: its retry backoff and what it compares of a
pod's status to decide that the API's copy must be written again."""

from __future__ import annotations

import copy

from ascend_fleet_dev.fleet.kubelet import run_pod, set_ready
from ascend_fleet_dev.real.nodeagent import Backoff, status_signature


def test_backoff_doubles_to_its_cap_and_resets_after_a_success() -> None:
    backoff = Backoff(0.5, 5.0)
    assert [backoff.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 0.5


def _running_pod(ready: bool) -> dict:
    pod = {
        "metadata": {"uid": "u1", "name": "p", "namespace": "n"},
        "spec": {"containers": [{"name": "engine", "image": "e"}]},
    }
    run_pod(pod, "127.11.0.9", ready=ready)
    return pod


def test_a_pod_marked_not_ready_by_someone_else_differs_from_what_the_agent_wrote() -> None:
    written = _running_pod(ready=True)
    marked = copy.deepcopy(written)
    for condition in marked["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="False", reason="NodeNotReady")
    assert status_signature(marked["status"]) != status_signature(written["status"])
    set_ready(marked, True)
    assert status_signature(marked["status"]) == status_signature(written["status"])


def test_timestamps_and_fields_a_kubelet_does_not_own_do_not_count() -> None:
    written = _running_pod(ready=True)
    seen = copy.deepcopy(written)
    for condition in seen["status"]["conditions"]:
        condition["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    seen["status"]["qosClass"] = "BestEffort"
    assert status_signature(seen["status"]) == status_signature(written["status"])
    seen["status"]["podIP"] = "127.11.0.10"
    assert status_signature(seen["status"]) != status_signature(written["status"])
