"""The PromQL a cycle issues: one query per distinct window, never one per object."""

from __future__ import annotations

import pytest

from ascend_fleet.api.catalog import Catalog
from ascend_fleet.control.queries import (
    Query,
    QueryWindow,
    duration,
    expected_samples,
    parse_vector,
    plan_queries,
    required_samples,
)

from .helpers import rule

CATALOG = Catalog.build()
UTILIZATION = CATALOG.expression("npu_utilization")


def test_fleet_scope_above_is_the_minimum_of_the_fleet_average_over_the_window():
    query = Query(QueryWindow(UTILIZATION, 300, "fleet"), "min")
    assert query.promql(15) == (
        f"min_over_time((avg by (namespace, inference) ({UTILIZATION}) "
        "and on () (time() - max(timestamp(up)) < 45))[315s:15s])"
    )


def test_replica_scope_below_is_the_maximum_per_replica():
    query = Query(QueryWindow("x", 2.5, "replica"), "max")
    assert query.promql(0.5) == (
        "max_over_time((avg by (namespace, inference, replica) (x) "
        "and on () (time() - max(timestamp(up)) < 1.5))[3s:500ms])"
    )


def test_queries_are_bounded_by_distinct_windows_not_objects():
    # 1,000 objects with the same two rules, and thresholds that differ per object.
    rules = []
    for index in range(1000):
        rules += [
            rule(threshold=0.5 + index / 10_000, for_="5m"),
            rule(metric="mem_fragmentation", threshold="15%", for_="10m", action="restart_service"),
        ]
    queries = plan_queries(rules, CATALOG, 15)
    # Two windows, each asked for its extreme and its sample count.
    assert sorted((q.window.seconds, q.window.scope, q.stat) for q in queries) == [
        (300.0, "fleet", "count"),
        (300.0, "fleet", "min"),
        (600.0, "replica", "count"),
        (600.0, "replica", "min"),
    ]


def test_both_directions_over_one_window_share_the_sample_count():
    queries = plan_queries(
        [rule(threshold="85%"), rule(comparison="<", threshold="30%", action="scale_down")], CATALOG, 1
    )
    assert sorted(q.stat for q in queries) == ["count", "max", "min"]


def test_a_window_shorter_than_a_step_takes_one_sample():
    [query, _] = plan_queries([rule(for_="0s")], CATALOG, 15)
    assert query.window.seconds == 15


def test_unknown_metrics_issue_no_query_and_raw_queries_do():
    queries = plan_queries([rule(metric="nope"), rule(metric=None, query=" up ")], CATALOG, 1)
    assert {q.window.expression for q in queries} == {"up"}


@pytest.mark.parametrize(
    ("window", "step", "fraction", "expected", "required"),
    [
        (300, 15, 0.8, 21, 17),
        (5, 1, 0.8, 6, 5),
        (3, 1, 1.0, 4, 4),
        (1, 15, 0.8, 1, 1),
        (10, 3, 0.5, 4, 2),
        (0, 15, 0.8, 1, 1),
    ],
)
def test_sample_counts(window, step, fraction, expected, required):
    assert expected_samples(window, step) == expected
    assert required_samples(window, step, fraction) == required


def test_durations():
    assert [duration(s) for s in (300, 1, 0.5, 1.25)] == ["300s", "1s", "500ms", "1250ms"]


def test_answers_map_to_objects_and_replicas_and_ignore_what_cannot_be_mapped():
    result = [
        {"metric": {"namespace": "a", "inference": "q", "replica": "1"}, "value": [1, "0.5"]},
        {"metric": {"namespace": "a", "inference": "q", "replica": "x"}, "value": [1, "0.5"]},
        {"metric": {"namespace": "a", "replica": "2"}, "value": [1, "0.5"]},
        {"metric": {"namespace": "a", "inference": "q", "replica": "3"}, "value": [1, "NaN"]},
    ]
    assert parse_vector(result, "replica") == {("a", "q", 1): 0.5}
    assert parse_vector(result[:1], "fleet") == {("a", "q", None): 0.5}
