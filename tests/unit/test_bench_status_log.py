"""bench/reconcile's record of status writes: what counts as a repeat, a new state, a child written twice."""

from bench.reconcile.operator_side import StatusLog, summarize_statuses, without_times, written_name


def status(ready: int, reason: str, at: str) -> dict:
    return {
        "readyReplicas": ready,
        "replicas": 1,
        "conditions": [
            {"type": "Ready", "status": "False", "reason": reason, "lastTransitionTime": at},
            {"type": "Progressing", "status": "True", "reason": "Recovering", "lastTransitionTime": at},
        ],
        "groupRestarts": [{"replica": 0, "count": 1, "lastTime": at}],
    }


def test_timestamps_are_ignored_everywhere():
    stripped = without_times(status(0, "ReplicasNotReady", "2026-01-01T00:00:00Z"))
    assert "lastTransitionTime" not in str(stripped) and "lastTime" not in str(stripped)
    assert stripped["conditions"][0]["reason"] == "ReplicasNotReady"


def test_a_write_that_only_moves_a_timestamp_is_a_repeat():
    log = StatusLog()
    log.add(status(0, "ReplicasNotReady", "2026-01-01T00:00:00Z"))
    log.add(status(0, "ReplicasNotReady", "2026-01-01T00:00:09Z"))
    log.add(status(1, "AllReplicasReady", "2026-01-01T00:00:10Z"))
    assert (log.writes, log.repeats, len(log.digests)) == (3, 1, 2)
    assert log.states == ["0/1 ReplicasNotReady/Recovering", "1/1 AllReplicasReady/Recovering"]


def test_going_back_to_an_earlier_state_is_a_change_not_a_repeat():
    log = StatusLog()
    for ready, reason in ((1, "AllReplicasReady"), (0, "ReplicasNotReady"), (1, "AllReplicasReady")):
        log.add(status(ready, reason, "t"))
    summary = summarize_statuses({"a": log})
    assert (summary["writes"], summary["changes"], summary["distinct"], summary["repeats"]) == (3, 3, 2, 0)


def test_the_name_a_write_is_about():
    assert written_name("POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "p"}}) == "p"
    path = "/apis/inference.ascendfleet.io/v1alpha1/namespaces/default/ascendinferences/llm-1/status"
    assert written_name("PATCH", path, {}) == "llm-1"
    assert written_name("PATCH", "/api/v1/namespaces/default/services/s", {}) == "s"
