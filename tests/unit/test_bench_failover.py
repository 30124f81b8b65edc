"""bench.failover's arithmetic: when the client counts a pool as served again, and what the JSON says."""

from __future__ import annotations

from bench.failover.__main__ import Run, as_json, picker_report, report, unseen
from bench.failover.npu import NpuRun, npu_report, policy_floor
from bench.failover.operator import OperatorRun, operator_report
from bench.failover.picker import STEADY, PickerRun, PlannedRun, Traffic, client_view, in_flight

from ascend_fleet_dev.real.localpods import Route
from ascend_fleet_dev.real.nodefailure import NodeFailure
from ascend_fleet_dev.real.pickerfailover import PickerFailover


def test_served_again_is_the_first_of_a_steady_run_of_answers_after_the_kill():
    before = [(t / 10, True) for t in range(50)]  # answered until the kill at 5 s
    gap = [(5 + t / 10, False) for t in range(160)]  # 16 s of failures
    blip = [(21.0, True), (21.1, False)]  # one answer is not a steady run
    after = [(21.2 + t / 10, True) for t in range(STEADY)]
    served, failed = client_view(before + gap + blip + after, killed=5.0)
    assert round(served, 1) == 16.2 and failed == 161


def test_a_pool_never_served_again_has_no_figure():
    assert client_view([(1.0, True), (6.0, False), (7.0, False)], killed=5.0) == (None, 2)


def test_json_names_the_picker_figures_and_leaves_the_rest_null():
    serving = Route("ns", "pool", "http://127.0.0.1:1", "epp-a")
    run = PickerRun(PickerFailover(serving, serving, 0.2, 0.0), 0.1, 1, 400, in_flight=1)
    leader = Route("ns", "pool", "http://127.0.0.1:1", "epp-a", elects=True)
    elected = PickerRun(PickerFailover(leader, leader, 16.4, 14.8, "a", "b"), 16.9, 163, 400)
    figures = as_json([], run, elected=elected)
    assert (figures["picker_failover_s"], figures["failed_requests_picker"]) == (0.1, 1)
    assert figures["in_flight_requests_picker"] == 1
    assert (figures["picker_elected_failover_s"], figures["failed_requests_picker_elected"]) == (16.9, 163)
    assert figures["picker_lease_floor_s"] == 14.8
    assert as_json([], None)["picker_failover_s"] is None
    assert as_json([], run)["picker_elected_failover_s"] is None
    table = picker_report([run, elected])
    assert "| both serve | 0.0 s | 0.2 s | 0.1 s | - | 1 | 1 | 400 |" in table
    assert "| leader elected | 14.8 s | 16.4 s | 16.9 s | 1.14x | 163 | 0 | 400 |" in table


def test_in_flight_counts_the_requests_sent_before_the_kill_and_answered_after():
    traffic = Traffic(pickers=None, rate=10.0)  # type: ignore[arg-type]  # never started
    traffic.results = [(1.0, True), (1.9, False), (2.05, True)]
    traffic.ended = [1.1, 2.3, 2.1]
    assert in_flight(traffic, killed=2.0) == 1
    assert in_flight(traffic, killed=1.05) == 1 and in_flight(traffic, killed=0.5) == 0


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
    # A run whose replica never served again has no figure, not a zero.
    assert as_json([], None, None, [NpuRun(15.0, 60.0)])["npu_unhealthy_replaced_s"] is None
    assert "| 15 s | 60 s | 38.1 s | 68.3 s | 68.9 s | 1.15x | another | 1 |" in npu_report([first])


def test_a_failover_not_seen_fails_the_bench():
    assert unseen([], None, [NpuRun(15.0, 60.0, restored=64.0)]) == []
    assert unseen([], None, [NpuRun(5.0, 60.0)]) == ["NPU run at 5 s: the replica serving again"]


def test_the_restored_figure_is_the_baseline_node_runs_and_a_replica_never_restored_fails_the_bench():
    restored = NodeFailure("n1", ["p-0"], 4.0, 50, 46.0, 46.1, 51.2, tainted=46.2, restored=70.5)
    faster = NodeFailure("n1", ["p-0"], 4.0, 20, 16.0, 16.1, 21.2, tainted=16.2, restored=40.3)
    figures = as_json(
        [Run(50, 5, restored, failover=0.1, sent=700), Run(20, 5, faster, failover=0.1, sent=400)], None
    )
    assert figures["replica_restored_s"] == 70.5
    assert [r["node_replica_restored_s"] for r in figures["node_runs"]] == [70.5, 40.3]
    lost = NodeFailure("n1", ["p-0"], 4.0, 20, 16.0, 16.1, 21.2, tainted=16.2)
    assert unseen([Run(20, 5, lost, failover=0.1)], None, []) == [
        "node grace 20 s: the replica restored elsewhere"
    ]
    assert "| 70.5 s (46.2 s) |" in report([Run(50, 5, restored)])


def test_the_node_figures_are_the_clients_in_the_baseline_run():
    failure = NodeFailure("n1", ["p-0"], 4.0, 50, 46.0, 46.1, 51.2, tainted=46.2, restored=70.5)
    other = NodeFailure("n1", ["p-0"], 4.0, 20, 16.0, 16.1, 21.2, tainted=16.2, restored=40.3)
    runs = [
        Run(20, 5, other, failover=9.9, failed=3, sent=400),
        Run(50, 5, failure, fallbacks=1, failover=0.1, failed=0, sent=690),
        Run(50, 5, failure, failover=0.12, failed=1, sent=705, dead_replica_answered=300),
    ]
    figures = as_json(runs, None)
    # The defaults' run (no fallbacks) at the upstream grace period, whatever the order.
    assert (figures["node_failover_s"], figures["failed_requests_node"]) == (0.12, 1)
    assert [(r["fallbacks"], r["sent_requests"]) for r in figures["node_runs"]] == [
        (0, 400),
        (1, 690),
        (0, 705),
    ]
    assert "| 0.1 s | 1 | 705 |" in report([runs[2]])
    assert report([runs[1]]).splitlines()[2].startswith("| 50 s | 1 |")
    # Answers never steady again after the cut: no figure, and the bench fails.
    assert as_json([Run(50, 5, failure)], None)["node_failover_s"] is None
    assert unseen([Run(50, 5, failure)], None, []) == ["node grace 50 s: steady answers (client)"]
    # Traffic that never reached the dead replica shows no failover: the run does not count.
    blind = Run(50, 5, failure, failover=0.1, sent=700, dead_replica_answered=0)
    assert unseen([blind], None, []) == ["node grace 50 s: client traffic on the dead replica before the cut"]


def test_the_operator_figure_is_the_standby_acting_and_not_acting_fails_the_bench():
    run = OperatorRun(9.3, "operator-a_1", leads=10.2, leader="operator-b_2", acts=12.4)
    figures = as_json([], None, operator=run)
    assert (figures["operator_takeover_s"], figures["operator_lease_taken_s"]) == (12.4, 10.2)
    assert figures["operator_lease_floor_s"] == 9.3
    assert "| 9.3 s | 10.2 s | 12.4 s | 1.33x |" in operator_report(run)
    assert as_json([], None)["operator_takeover_s"] is None  # not run: no figure, not a zero
    assert unseen([], None, [], OperatorRun(9.3, "operator-a_1", leads=10.2)) == [
        "the standby operator acting"
    ]


def test_the_service_client_counts_failover_until_its_last_failure():
    from bench.failover.service import settled_view

    before = [(t / 10, True) for t in range(50)]
    mixed = [(5.0, False), (5.1, True), (5.2, True), (5.3, True), (5.4, True), (5.5, True), (6.0, False)]
    after = [(6.1 + t / 10, True) for t in range(20)]
    settled, failed = settled_view(before + mixed + after, killed=5.0)
    assert round(settled, 1) == 1.1 and failed == 2  # five answers in a row before 6.0 did not count
    assert settled_view([(1.0, True), (6.0, False)], killed=5.0) == (None, 1)


def test_json_names_the_service_mode_figures():
    from bench.failover.__main__ import service_json, service_report, service_unseen
    from bench.failover.service import ServiceRun

    failure = NodeFailure("n2", ["qwen-1-5b-1"], 3.2, 50, out_of_service=18.2, evicted=18.2, restored=19.9)
    failure.fewest_survivors = 1
    run = ServiceRun(failure, 18.4, 28, 205, 22)
    figures = as_json([], None, service=run)
    assert figures["service_node_failover_s"] == 18.4
    assert figures["failed_requests_service_node"] == 28
    assert figures["replica_restored_untainted_s"] == 19.9
    assert figures["service_run"]["left_service_s"] == 18.2
    assert service_json(None)["service_node_failover_s"] is None
    assert (
        "| service | 50 s | 3.2 s | 18.2 s | 18.2 s | not seen | 19.9 s | 1 | 18.4 s | 28 | 205 | 22 |"
        in (service_report(run))
    )
    assert service_unseen(run) == []
    failure.restored = None
    assert service_unseen(run) == ["service mode: the replica restored elsewhere without a taint"]
