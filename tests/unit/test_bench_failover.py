"""bench.failover's arithmetic: when the client counts a pool as served again, and what the JSON says."""

from __future__ import annotations

from bench.failover.__main__ import NOT_MEASURED, Run, as_json, report, unseen
from bench.failover.npu import NpuRun, npu_report, policy_floor
from bench.failover.picker import STEADY, PickerRun, PlannedRun, _client_view

from ascend_fleet.devcluster.real.localpods import Route
from ascend_fleet.devcluster.real.nodefailure import NodeFailure
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


def test_the_npu_figure_is_the_default_interval_runs_and_its_floor_is_the_rules_window_and_the_drain():
    assert policy_floor() == 60.0  # npu_unhealthy > 0 for 30s, then drainSeconds 30
    first = NpuRun(15.0, 60.0, "Ascend910-3", "n2", 38.1, 68.3, "n1", 68.9, 1)
    second = NpuRun(5.0, 60.0, "Ascend910-3", "n2", 33.6, 64.1, "n1", 64.8, 1)
    figures = as_json([], None, None, [first, second])
    assert figures["npu_unhealthy_replaced_s"] == 68.9
    assert [run["control_interval_s"] for run in figures["npu_runs"]] == [15.0, 5.0]
    assert figures["npu_runs"][0]["moved_node"] is True
    assert "npu_unhealthy_replaced_s" not in NOT_MEASURED
    # A run whose replica never served again has no figure, not a zero.
    assert as_json([], None, None, [NpuRun(15.0, 60.0)])["npu_unhealthy_replaced_s"] is None
    assert "| 15 s | 60 s | 38.1 s | 68.3 s | 68.9 s | 1.15x | another | 1 |" in npu_report([first])


def test_a_failover_not_seen_fails_the_bench():
    assert unseen([], None, [NpuRun(15.0, 60.0, restored=64.0)]) == []
    assert unseen([], None, [NpuRun(5.0, 60.0)]) == ["NPU run at 5 s: the replica serving again"]


def test_the_restored_figure_is_the_baseline_node_runs_and_a_replica_never_restored_fails_the_bench():
    restored = NodeFailure("n1", ["p-0"], 4.0, 50, 46.0, 46.1, 51.2, tainted=46.2, restored=70.5)
    faster = NodeFailure("n1", ["p-0"], 4.0, 20, 16.0, 16.1, 21.2, tainted=16.2, restored=40.3)
    figures = as_json([Run(50, 5, restored), Run(20, 5, faster)], None)
    assert figures["replica_restored_s"] == 70.5
    assert [r["node_replica_restored_s"] for r in figures["node_runs"]] == [70.5, 40.3]
    assert "replica_restored_s" not in NOT_MEASURED
    lost = NodeFailure("n1", ["p-0"], 4.0, 20, 16.0, 16.1, 21.2, tainted=16.2)
    assert unseen([Run(20, 5, lost)], None, []) == ["node grace 20 s: the replica restored elsewhere"]
    assert "| 70.5 s (46.2 s) |" in report([Run(50, 5, restored)])
