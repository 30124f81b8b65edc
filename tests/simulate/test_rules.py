"""The rules policy is the operator's own evaluation code, fed windows the way Prometheus would."""

from __future__ import annotations

import pytest

from ascend_fleet.api.v1alpha1 import Rule
from ascend_fleet.control import evaluate
from ascend_fleet.control.model import ControlDecision
from ascend_fleet.simulate import EngineModel, RulesPolicy, fleet_config, simulate
from ascend_fleet.simulate import rules as rules_module
from ascend_fleet.simulate.curve import BatchCurve
from ascend_fleet.simulate.metrics import MetricStore, Scrape
from ascend_fleet.simulate.run import load_spec
from ascend_fleet.simulate.traces import HOUR

from .support import periodic

CURVE = BatchCurve()


def test_the_rules_policy_imports_the_operators_evaluation_module():
    assert rules_module.evaluate is evaluate
    assert not hasattr(rules_module, "_scale") and not hasattr(rules_module, "_check_rule")


def test_every_rules_decision_comes_from_the_operators_decide(monkeypatch):
    answers: list[list[ControlDecision]] = []
    real = evaluate.decide

    def spy(fleets, observations, now, policy=None):
        decisions = real(fleets, observations, now, policy)
        answers.append(decisions)
        return decisions

    monkeypatch.setattr(evaluate, "decide", spy)
    spec = load_spec()
    policy = RulesPolicy(spec)
    # 14 req/s of 200 tokens keeps two replicas (2 x 1550 tokens/s) above 85 % the whole time.
    result = simulate(fleet_config(spec), periodic(14.0, HOUR, 200), policy)

    made = [d for answer in answers for d in answer]
    ticks = [
        policy.interval * i for i in range(1, int(HOUR // policy.interval))
    ]  # every interval, before the end
    assert len(answers) == len(ticks)  # one decide() per control tick
    ups = [d for d in made if d.action == "scale_up"]
    assert ups and result.scale_ups == len(ups)
    times = [
        tick for tick, answer in zip(ticks, answers, strict=True) for d in answer if d.action == "scale_up"
    ]
    # The window must fill first (5 min of samples above 85 %), then the spec's 3 min cooldown spaces them.
    assert times[0] >= 300.0
    assert all(b - a >= spec.autoscaling.scale_up_cooldown for a, b in zip(times, times[1:], strict=False))


def test_windows_are_answered_like_prometheus_subqueries():
    store = MetricStore(retention=3600)
    for i, (u0, u1) in enumerate([(0.9, 0.95), (0.8, 0.99), (0.92, 0.88)], start=1):
        store.add(Scrape(15.0 * i, {0: (u0, 0.1 * i), 1: (u1, 0.2)}))
    spec = load_spec()
    policy = RulesPolicy(spec)
    observations = policy.observe(store, 45.0)
    by_stat = {(q.window.scope, q.window.seconds, q.stat): observations.series[q] for q in policy.queries}
    fleet_min = by_stat[("fleet", 300.0, "min")][("simulated", "simulated", None)]
    assert fleet_min == pytest.approx(min((0.9 + 0.95) / 2, (0.8 + 0.99) / 2, (0.92 + 0.88) / 2))
    assert by_stat[("fleet", 300.0, "count")][("simulated", "simulated", None)] == 3
    assert by_stat[("replica", 600.0, "min")][("simulated", "simulated", 0)] == pytest.approx(0.1)
    assert by_stat[("replica", 600.0, "min")][("simulated", "simulated", 1)] == pytest.approx(0.2)


def _restart_scenario(restarts: bool):
    """Two replicas, a light load that keeps batches at one sequence, fragmentation that grows fast."""
    spec = load_spec()
    spec = spec.model_copy(
        update={
            "rules": [Rule(metric="mem_fragmentation", threshold="20%", for_="2m", action="restart_service")],
            "autoscaling": spec.autoscaling.model_copy(update={"min_replicas": 2, "max_replicas": 2}),
        }
    )
    engine = EngineModel(cold_start=60.0, fragmentation_idle_per_hour=0.6, fragmentation_busy_per_hour=0.6)
    config = fleet_config(spec, engine)
    policy = RulesPolicy(spec, restarts=restarts, name="rules" if restarts else "rules-no-restart")
    # One short request every 2 s finishes (20 tokens at ~45 tokens/s) long before the next arrives.
    return simulate(config, periodic(0.5, 0.75 * HOUR, 20), policy), config


def test_a_fragmentation_restart_removes_the_latency_penalty():
    result, config = _restart_scenario(restarts=True)
    floor = CURVE.first_token(1)  # a lone request's first token, without penalty

    restarted = [life for life in result.lives if life.index == 0 and life.end == "restarted"]
    assert result.rule_restarts >= 1 and restarted
    down = restarted[0].deleted
    back = next(life.ready_at for life in result.lives if life.index == 0 and life.created >= down)
    assert back == pytest.approx(down + config.engine.cold_start)

    def ratios(start: float, end: float) -> list[float]:
        return [
            result.first_token[i] / floor
            for i, t in enumerate(result.arrivals)
            if start <= t < end and result.served_by[i] == 0
        ]

    before = ratios(down - 120.0, down - config.drain_seconds)
    after = ratios(back, back + 600.0)
    # Before: fragmentation above 20 % slows every step (the slowdown the engine model gives it).
    assert before and min(before) > config.engine.slowdown(0.20) - 1e-9 > 1.1
    # After: a fresh replica, and the first token is the curve's again.
    assert after and max(after) == pytest.approx(1.0, rel=1e-9)

    without, _ = _restart_scenario(restarts=False)
    late = [
        without.first_token[i] / floor for i, t in enumerate(without.arrivals) if back <= t < back + 600.0
    ]
    assert without.rule_restarts == 0 and min(late) > 1.1  # without restarts the penalty stays
