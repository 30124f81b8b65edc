"""The memory report's pure parts on recorded query_range answers: buckets, restarts, CSV rows."""

from __future__ import annotations

import csv
import io

import pytest

from ascend_fleet.report.memory import (
    COLUMNS,
    RESTART_COUNTER,
    ReportWindow,
    csv_rows,
    csv_text,
    histories,
    range_queries,
    restart_actions,
    restarts,
)

T0 = 1_780_000_020.0  # a multiple of 60: 2026-05-28T20:27:00Z


def series(metric: str, replica: int, pod: str, points: list[tuple[float, str]]) -> dict:
    labels = {"namespace": "team-a", "inference": "qwen", "replica": str(replica), "pod": pod}
    return {"metric": {**labels, "__name__": metric}, "values": [[at, value] for at, value in points]}


# What Prometheus answered for three buckets of 60 s: replica 1's pod was replaced at T0 + 120, and
# replica 0's process restarted under the same pod name at T0 + 60 (its counter went back to 0).
ANSWERS = {
    "hbm_used_bytes": [
        series("", 0, "qwen-0-0", [(T0, "1000"), (T0 + 60, "1100"), (T0 + 120, "1200")]),
        series("", 1, "qwen-1-0", [(T0, "2000"), (T0 + 60, "2500")]),
        series("", 1, "qwen-1-0-b", [(T0 + 120, "900")]),
    ],
    "hbm_reserved_bytes": [
        series("", 0, "qwen-0-0", [(T0, "1500"), (T0 + 60, "1500"), (T0 + 120, "1600")]),
        series("", 1, "qwen-1-0", [(T0, "3000"), (T0 + 60, "3500")]),
        series("", 1, "qwen-1-0-b", [(T0 + 120, "1000")]),
    ],
    "fragmentation": [
        series("", 0, "qwen-0-0", [(T0, "0.01"), (T0 + 120, "0.02")]),
        series("", 1, "qwen-1-0", [(T0, "0.05"), (T0 + 60, "0.2")]),
        series("", 1, "qwen-1-0-b", [(T0 + 120, "0")]),
    ],
    RESTART_COUNTER: [
        series("", 0, "qwen-0-0", [(T0, "7"), (T0 + 60, "0"), (T0 + 120, "1")]),
        series("", 1, "qwen-1-0", [(T0, "3"), (T0 + 60, "9")]),
        series("", 1, "qwen-1-0-b", [(T0 + 120, "0")]),
    ],
}


def test_the_window_starts_on_a_multiple_of_the_step_and_includes_its_end():
    window = ReportWindow.ending_at(T0 + 130, since=150, step=60)
    assert window.start == T0 - 60
    assert window.buckets() == [T0 - 60, T0, T0 + 60, T0 + 120]
    with pytest.raises(ValueError, match="positive"):
        ReportWindow.ending_at(T0, since=60, step=0)


def test_range_queries_select_the_inference_and_keep_the_pod_for_restarts():
    queries = range_queries("team-a", 'qw"en')
    assert set(queries) == {
        "hbm_used_bytes", "hbm_reserved_bytes", "fragmentation", "largest_free_block_bytes", RESTART_COUNTER}  # fmt: skip
    assert queries["fragmentation"] == (
        "max by (namespace, inference, replica, pod) "
        '(ascend_fleet_memory_fragmentation_ratio{namespace="team-a", inference="qw\\"en"})'
    )
    assert "ascend_fleet_memory_reserved_bytes" in queries["hbm_reserved_bytes"]
    assert "ascend_fleet_alloc_retries_total" in queries[RESTART_COUNTER]
    # The worst device's largest free block is the smallest one.
    assert queries["largest_free_block_bytes"] == (
        "min by (namespace, inference, replica, pod) "
        '(ascend_fleet_memory_largest_free_block_bytes{namespace="team-a", inference="qw\\"en"})'
    )


def test_restarts_are_a_new_pod_or_a_counter_that_went_down():
    by_replica = histories(ANSWERS)
    assert list(by_replica) == [("team-a", "qwen", 0), ("team-a", "qwen", 1)]
    assert restarts(by_replica[("team-a", "qwen", 0)]) == [T0 + 60]
    assert restarts(by_replica[("team-a", "qwen", 1)]) == [T0 + 120]


def test_the_newer_pod_wins_a_bucket_both_pods_report():
    overlapping = {
        "fragmentation": [
            series("", 1, "old", [(T0, "0.3"), (T0 + 60, "0.31")]),
            series("", 1, "new", [(T0 + 60, "0.0")]),
        ]
    }
    history = histories(overlapping)[("team-a", "qwen", 1)]
    assert history.values[T0 + 60]["fragmentation"] == 0.0
    assert history.pods[T0 + 60] == "new"


def test_csv_has_one_row_per_replica_and_bucket_and_leaves_absent_values_empty():
    text = csv_text(csv_rows(histories(ANSWERS)))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == COLUMNS
    assert [(row["replica"], row["time"]) for row in rows] == [
        ("0", "2026-05-28T20:27:00Z"),
        ("0", "2026-05-28T20:28:00Z"),
        ("0", "2026-05-28T20:29:00Z"),
        ("1", "2026-05-28T20:27:00Z"),
        ("1", "2026-05-28T20:28:00Z"),
        ("1", "2026-05-28T20:29:00Z"),
    ]
    second = rows[1]
    # Replica 0 had no fragmentation sample in its second bucket: empty, not 0.
    assert second["fragmentation"] == "" and second["hbm_used_bytes"] == "1100"
    assert all(row["largest_free_block_bytes"] == "" for row in rows)
    assert rows[4]["fragmentation"] == "0.2" and rows[4]["hbm_reserved_bytes"] == "3500"
    # The replacement pod's 0 fragmentation is a measured 0, so it is written.
    assert rows[5]["fragmentation"] == "0" and rows[5]["hbm_used_bytes"] == "900"


def test_restart_service_actions_are_read_per_replica_within_the_window():
    actions = [
        {"time": "2026-05-28T20:28:10Z", "action": "restart_service", "target": "replica-1"},
        {"time": "2026-05-28T20:28:20Z", "action": "scale_up", "target": "fleet"},
        {"time": "2026-05-27T10:00:00Z", "action": "restart_service", "target": "replica-0"},
        {"time": "not a time", "action": "restart_service", "target": "replica-0"},
    ]
    assert restart_actions(actions, T0, T0 + 180) == {1: [T0 + 70]}
