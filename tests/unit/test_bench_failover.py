"""bench.failover's arithmetic: when the client counts a pool as served again, and what the JSON says."""

from __future__ import annotations

from bench.failover.__main__ import NOT_MEASURED, as_json
from bench.failover.picker import STEADY, PickerRun, PlannedRun, _client_view

from ascend_fleet.devcluster.real.localpods import Route
from ascend_fleet.devcluster.real.pickerfailover import PickerFailover


def test_served_again_is_the_first_of_a_steady_run_of_answers_after_the_kill():
    before = [(t / 10, True) for t in range(50)]  # answered until the kill at 5 s
    gap = [(5 + t / 10, False) for t in range(160)]  # 16 s of failures
    blip = [(21.0, True), (21.1, False)]  # one answer is not a steady run
    after = [(21.2 + t / 10, True) for t in range(STEADY)]
    served, failed = _client_view(before + gap + blip + after, killed=5.0)
    assert round(served, 1) == 16.2 and failed == 161


def test_a_pool_never_served_again_has_no_figure():
    assert _client_view([(1.0, True), (6.0, False), (7.0, False)], killed=5.0) == (None, 2)


def test_json_names_the_picker_figures_and_leaves_the_rest_null():
    route = Route("ns", "pool", "http://127.0.0.1:1", "epp-a", "http://127.0.0.1:2/metrics", elects=True)
    run = PickerRun(PickerFailover(route, route, 16.4, 14.8, "a", "b"), 16.9, 163, 400)
    figures = as_json([], run)
    assert (figures["picker_failover_s"], figures["failed_requests_picker"]) == (16.9, 163)
    assert "picker_failover_s" not in NOT_MEASURED
    assert all(figures[key] is None for key in NOT_MEASURED)
    assert as_json([], None)["picker_failover_s"] is None


def test_json_carries_the_planned_operations_failed_requests():
    planned = PlannedRun(
        {"scale_in": 0, "restart": 1, "rollout": 0}, {"scale_in": 30, "restart": 40, "rollout": 90}
    )
    figures = as_json([], None, planned)
    assert [figures[f"failed_requests_{op}"] for op in ("scale_in", "restart", "rollout")] == [0, 1, 0]
    assert as_json([], None)["failed_requests_restart"] is None
