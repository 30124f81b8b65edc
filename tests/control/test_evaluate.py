"""Decisions as a pure function of rules, answers, object state and the clock."""

from __future__ import annotations

from ascend_fleet.control.actions import decision_result
from ascend_fleet.control.evaluate import (
    REASON_INSUFFICIENT,
    REASON_NO_DATA,
    REASON_UNKNOWN_METRIC,
    decide,
    evaluate,
)
from ascend_fleet.control.model import PastAction
from ascend_fleet.control.queries import rule_queries

from .helpers import NAME, NOW, NS, POLICY, answer, empty_answers, fleet, rule

UP = rule(threshold="85%", action="scale_up")
DOWN = rule(comparison="<", threshold="30%", action="scale_down")
FRAG = rule(metric="mem_fragmentation", threshold="15%", action="restart_service")


def test_a_rule_that_held_over_a_full_window_scales_up_by_one():
    result = evaluate(fleet(UP, replicas=2), answer(empty_answers(UP), UP, 0.92), NOW, POLICY)
    [decision] = result.decisions
    assert (decision.action, decision.target, decision.replicas_from, decision.replicas_to) == (
        "scale_up",
        "fleet",
        2,
        3,
    )
    assert decision.value == 0.92 and decision.rule == "npu_utilization > 85% for 5s -> scale_up"
    assert result.metrics.available


def test_a_minimum_at_the_threshold_does_not_hold_for_greater_than():
    assert not decide([fleet(UP)], answer(empty_answers(UP), UP, 0.85), NOW, POLICY)
    at_least = rule(threshold="85%", comparison=">=")
    assert decide([fleet(at_least)], answer(empty_answers(at_least), at_least, 0.85), NOW, POLICY)


def test_a_window_with_too_few_samples_is_not_a_breach():
    # 5 s at 1 s steps spans 6 samples (one at or before the window's start); 80 % of them is 5.
    result = evaluate(fleet(UP), answer(empty_answers(UP), UP, 0.99, samples=4), NOW, POLICY)
    assert not result.decisions
    assert (result.metrics.available, result.metrics.reason) == (False, REASON_INSUFFICIENT)
    assert "4 samples in the last 5s, 5 needed" in result.metrics.message
    assert decide([fleet(UP)], answer(empty_answers(UP), UP, 0.99, samples=5), NOW, POLICY)


def test_no_series_for_the_object_is_no_data_and_no_action():
    result = evaluate(fleet(UP), empty_answers(UP), NOW, POLICY)
    assert not result.decisions
    assert (result.metrics.available, result.metrics.reason) == (False, REASON_NO_DATA)


def test_a_young_fleet_is_warming_up_not_missing_data():
    result = evaluate(fleet(UP, since=NOW - 2), empty_answers(UP), NOW, POLICY)
    assert not result.decisions and result.metrics.available


def test_scale_up_cooldown_holds_then_expires():
    last = PastAction(NOW - 10, "r", "scale_up", "fleet")
    held = answer(empty_answers(UP), UP, 0.95)
    assert not decide([fleet(UP, actions=(last,), scale_up_cooldown="30s")], held, NOW, POLICY)
    assert decide([fleet(UP, actions=(last,), scale_up_cooldown="5s")], held, NOW, POLICY)


def test_dry_run_records_do_not_hold_back_real_actions():
    rehearsal = PastAction(NOW - 10, "r", "scale_up", "fleet", dry_run=True)
    held = answer(empty_answers(UP), UP, 0.95)
    [decision] = decide([fleet(UP, actions=(rehearsal,), scale_up_cooldown="30s")], held, NOW, POLICY)
    assert not decision.dry_run
    assert not decide(
        [fleet(UP, actions=(rehearsal,), scale_up_cooldown="30s", dry_run=True)], held, NOW, POLICY
    )


def test_max_and_min_replicas_bound_scaling():
    assert not decide(
        [fleet(UP, replicas=3, max_replicas=3)], answer(empty_answers(UP), UP, 0.99), NOW, POLICY
    )
    low = answer(empty_answers(DOWN), DOWN, 0.05)
    assert not decide([fleet(DOWN, replicas=1, min_replicas=1)], low, NOW, POLICY)
    [decision] = decide([fleet(DOWN, replicas=2, min_replicas=1)], low, NOW, POLICY)
    assert (decision.action, decision.replicas_to) == ("scale_down", 1)


def test_scale_down_waits_its_cooldown_after_any_scale():
    low = answer(empty_answers(DOWN), DOWN, 0.05)
    after_up = PastAction(NOW - 20, "r", "scale_up", "fleet")
    assert not decide([fleet(DOWN, actions=(after_up,), scale_down_cooldown="60s")], low, NOW, POLICY)
    assert decide([fleet(DOWN, actions=(after_up,), scale_down_cooldown="10s")], low, NOW, POLICY)


def test_scale_up_vetoes_scale_down():
    both = answer(answer(empty_answers(UP, DOWN), UP, 0.99), DOWN, 0.99)
    other = rule(metric="queue_depth", comparison="<", threshold=5, action="scale_down")
    answers = answer(answer(empty_answers(UP, other), UP, 0.99), other, 0)
    assert [
        d.action for d in decide([fleet(UP, other, replicas=3, max_replicas=3)], answers, NOW, POLICY)
    ] == []
    assert [d.action for d in decide([fleet(UP, DOWN)], both, NOW, POLICY)] == ["scale_up"]


def test_fragmentation_restarts_only_the_replica_that_breached():
    answers = empty_answers(FRAG)
    for replica, value in ((0, 0.02), (1, 0.30), (2, 0.01)):
        answer(answers, FRAG, value, replica=replica)
    [decision] = decide([fleet(FRAG, replicas=3)], answers, NOW, POLICY)
    assert (decision.action, decision.target, decision.replica, decision.leader) == (
        "restart_service",
        "replica-1",
        1,
        f"{NAME}-1",
    )


def test_restarts_share_the_disruption_budget_worst_first():
    answers = empty_answers(FRAG)
    for replica, value in ((0, 0.20), (1, 0.40), (2, 0.01)):
        answer(answers, FRAG, value, replica=replica)
    [first] = decide([fleet(FRAG, replicas=3)], answers, NOW, POLICY)
    assert first.replica == 1
    # Replica 1 now drains: it takes the whole budget of 1, so replica 0 waits.
    restarting = PastAction(NOW - 1, "r", "restart_service", "replica-1")
    assert not decide([fleet(FRAG, replicas=3, draining=(1,), actions=(restarting,))], answers, NOW, POLICY)
    # A rollout's drain or a replica that is not ready counts against the same budget.
    assert not decide([fleet(FRAG, replicas=3, ready=(0, 1))], answers, NOW, POLICY)
    both = decide([fleet(FRAG, replicas=3, max_unavailable=2)], answers, NOW, POLICY)
    assert [d.replica for d in both] == [1, 0]


def test_a_replica_is_restarted_at_most_once_per_restart_cooldown():
    answers = answer(empty_answers(FRAG), FRAG, 0.5, replica=0)
    recent = PastAction(NOW - 30, "r", "restart_service", "replica-0")
    assert not decide(
        [fleet(FRAG, replicas=1, actions=(recent,), restart_cooldown="60s")], answers, NOW, POLICY
    )
    assert decide([fleet(FRAG, replicas=1, actions=(recent,), restart_cooldown="20s")], answers, NOW, POLICY)


def test_a_replica_that_just_started_has_no_window_yet():
    young = fleet(FRAG, replicas=1, since=NOW - 3)
    result = evaluate(young, empty_answers(FRAG), NOW, POLICY)
    assert result.metrics.available and not result.decisions


def test_dry_run_decides_the_same_and_marks_it():
    [decision] = decide([fleet(UP, dry_run=True)], answer(empty_answers(UP), UP, 0.99), NOW, POLICY)
    assert decision.dry_run and decision_result(decision) == "would have done: replicas 2 -> 3"


def test_notify_repeats_at_most_once_per_window():
    note = rule(threshold="50%", action="notify")
    answers = answer(empty_answers(note), note, 0.9)
    [decision] = decide([fleet(note)], answers, NOW, POLICY)
    assert decision_result(decision) == "notified"
    recent = PastAction(NOW - 2, note.display_name(), "notify", "fleet")
    assert not decide([fleet(note, actions=(recent,))], answers, NOW, POLICY)


def test_unknown_metric_is_reported_and_nothing_of_that_object_acts():
    bad = rule(metric="gpu_util")
    result = evaluate(fleet(UP, bad), answer(empty_answers(UP), UP, 0.99), NOW, POLICY)
    assert not result.decisions
    assert (result.metrics.available, result.metrics.reason) == (False, REASON_UNKNOWN_METRIC)
    assert "'gpu_util'" in result.metrics.message and "npu_utilization" in result.metrics.message


def test_a_failed_query_blocks_only_the_rules_that_need_it():
    answers = answer(empty_answers(UP, FRAG), UP, 0.99)
    answer(answers, FRAG, 0.5, replica=0)
    extreme, _ = rule_queries(FRAG, POLICY.catalog, POLICY.step)
    answers.fail(extreme, "PrometheusUnavailable", "Prometheus is unreachable")
    result = evaluate(fleet(UP, FRAG), answers, NOW, POLICY)
    assert [d.action for d in result.decisions] == ["scale_up"]
    assert (result.metrics.available, result.metrics.reason) == (False, "PrometheusUnavailable")


def test_other_objects_are_unaffected_by_one_objects_data():
    answers = answer(empty_answers(UP), UP, 0.99, name="other")
    decisions = decide([fleet(UP), fleet(UP, name="other")], answers, NOW, POLICY)
    assert [(d.namespace, d.name) for d in decisions] == [(NS, "other")]


def test_a_value_without_a_count_means_prometheus_was_not_scraping():
    answers = answer(empty_answers(UP), UP, 0.99)
    _, count = rule_queries(UP, POLICY.catalog, POLICY.step)
    answers.series[count] = {}
    result = evaluate(fleet(UP), answers, NOW, POLICY)
    assert not result.decisions and result.metrics.reason == REASON_INSUFFICIENT


def _fragmented(*replicas: int) -> object:
    answers = empty_answers(FRAG)
    for replica in range(4):
        answer(answers, FRAG, 0.40 if replica in replicas else 0.01, replica=replica)
    return answers


def test_a_restart_never_leaves_fewer_serving_nodes_than_min_domains():
    answers = _fragmented(1)
    result = evaluate(fleet(FRAG, replicas=2, domains=("n1", "n2")), answers, NOW, POLICY)
    assert not result.decisions
    assert result.notes == [
        f"{FRAG.display_name()}: no restart, replica 1 is the last serving replica on node n2: without it 1 node"
        " would serve, spec.availability.minDomains is 2 (a replica serving on another node lets it go)"
    ]
    # A third node still serving, or a second replica on the same node, lets it go.
    assert decide([fleet(FRAG, replicas=3, domains=("n1", "n2", "n3"))], answers, NOW, POLICY)
    assert decide([fleet(FRAG, replicas=3, domains=("n1", "n2", "n2"))], answers, NOW, POLICY)
    # Without spec.availability the disruption budget alone decides.
    assert decide([fleet(FRAG, replicas=2)], answers, NOW, POLICY)


def test_restarts_in_one_cycle_count_each_other_out_of_their_domains():
    answers = _fragmented(0, 1)
    three = fleet(FRAG, replicas=3, max_unavailable=2, domains=("n1", "n2", "n3"))
    result = evaluate(three, answers, NOW, POLICY)
    # Both fit the budget of 2, but after the first only two nodes serve: the second would leave one.
    assert [d.replica for d in result.decisions] == [0]
    assert any(
        "replica 1 is the last serving replica on node n2: without it 1 node" in n for n in result.notes
    )


def test_a_restart_waits_while_a_serving_replicas_domain_is_not_known():
    result = evaluate(fleet(FRAG, replicas=3, domains=("n1", None, "n3")), _fragmented(0), NOW, POLICY)
    assert not result.decisions
    assert result.notes == [
        f"{FRAG.display_name()}: no restart, the node of replica 1 is not known, so taking replica 0 might"
        " leave fewer than 2 serving nodes (spec.availability.minDomains)"
    ]


def test_scale_down_never_takes_the_last_serving_replica_of_a_domain_it_needs():
    low = answer(empty_answers(DOWN), DOWN, 0.1)
    # Scale-in removes the highest replica: 2, alone on n2.
    result = evaluate(fleet(DOWN, replicas=3, domains=("n1", "n1", "n2")), low, NOW, POLICY)
    assert (
        not result.decisions
        and "no scale-down, replica 2 is the last serving replica on node n2" in (result.notes[0])
    )
    [decision] = decide([fleet(DOWN, replicas=3, domains=("n1", "n2", "n2"))], low, NOW, POLICY)
    assert (decision.action, decision.replicas_to) == ("scale_down", 2)
    # A replica already out of service takes no domain with it.
    assert decide([fleet(DOWN, replicas=3, ready=(0, 1), domains=("n1", "n2", "n3"))], low, NOW, POLICY)


# shift_traffic ---------------------------------------------------------------------------------------------------

TO_INT8 = rule(metric="ttft_p99", threshold=1.0, action="shift_traffic", to="int8", step=25)
TO_FP16 = rule(metric="ttft_p99", comparison="<", threshold=0.5, action="shift_traffic", to="fp16", step=25)


def split(*rules, traffic=None, **state):
    from dataclasses import replace

    return replace(fleet(*rules, **state), traffic=traffic or {"fp16": 100, "int8": 0})


def test_a_holding_shift_rule_moves_its_step_to_its_variant():
    result = evaluate(split(TO_INT8, TO_FP16), answer(empty_answers(TO_INT8), TO_INT8, 1.4), NOW, POLICY)
    [decision] = result.decisions
    assert (decision.action, decision.target) == ("shift_traffic", "fleet")
    assert dict(decision.traffic_to) == {"fp16": 75, "int8": 25}
    assert decision_result(decision) == "traffic fp16 100%, int8 0% -> fp16 75%, int8 25%"


def test_the_way_back_waits_for_the_shift_cooldown_of_either_direction():
    answers = answer(empty_answers(TO_FP16), TO_FP16, 0.2)
    traffic = {"fp16": 50, "int8": 50}
    recent = (PastAction(NOW - 30, TO_INT8.display_name(), "shift_traffic", "fleet"),)
    held = evaluate(
        split(TO_FP16, traffic=traffic, actions=recent, shift_cooldown="2m"), answers, NOW, POLICY
    )
    assert not held.decisions and "shift cooldown, 90s left" in held.notes[0]
    later = (PastAction(NOW - 121, TO_INT8.display_name(), "shift_traffic", "fleet"),)
    [back] = evaluate(
        split(TO_FP16, traffic=traffic, actions=later, shift_cooldown="2m"), answers, NOW, POLICY
    ).decisions
    assert dict(back.traffic_to) == {"fp16": 75, "int8": 25}


def test_a_variant_with_everything_already_gets_no_shift():
    result = evaluate(
        split(TO_INT8, traffic={"fp16": 0, "int8": 100}),
        answer(empty_answers(TO_INT8), TO_INT8, 2.0),
        NOW,
        POLICY,
    )
    assert not result.decisions and "int8 has all the traffic already" in result.notes[0]


def test_a_dry_run_shift_is_recorded_and_paced_by_dry_run_records_only():
    answers = answer(empty_answers(TO_INT8), TO_INT8, 1.4)
    real_recent = (PastAction(NOW - 10, TO_INT8.display_name(), "shift_traffic", "fleet", dry_run=False),)
    [decision] = evaluate(split(TO_INT8, actions=real_recent, dry_run=True), answers, NOW, POLICY).decisions
    assert decision.dry_run and decision_result(decision).startswith("would have done: traffic")


def test_a_signal_that_did_not_hold_shifts_nothing():
    assert not evaluate(split(TO_INT8), answer(empty_answers(TO_INT8), TO_INT8, 0.9), NOW, POLICY).decisions
