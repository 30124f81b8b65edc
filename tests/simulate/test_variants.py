"""Precision variants in the simulator: int8 replicas run faster, shift_traffic moves the split, and the report
counts the tokens served at each precision."""

from __future__ import annotations

from dataclasses import replace

from ascend_fleet.control.actions import decision_result
from ascend_fleet.simulate import RulesPolicy, fleet_config, simulate
from ascend_fleet.simulate.report import summarize, table
from ascend_fleet.simulate.run import load_spec
from ascend_fleet.simulate.traces import HOUR
from ascend_fleet.simulate.variants import INT8_SPEEDUP, draw, precision_shares, sim_variants
from tests.support.paths import ROOT

from .support import Script, periodic

SPEC = ROOT / "examples" / "precision-variants-sim.yaml"


def test_replicas_alternate_between_variants_and_the_split_follows_the_weights():
    spec = load_spec(SPEC)
    config = fleet_config(spec)
    assert [(v.name, v.speed) for v in config.variants] == [("fp16", 1.0), ("int8", INT8_SPEEDUP)]
    assert dict(config.traffic) == {"fp16": 50, "int8": 50}
    result = simulate(
        replace(config, traffic=(("fp16", 75), ("int8", 25))), periodic(4.0, 600.0, 100), Script({})
    )
    served = [i for i in result.served_by if i >= 0]
    share = sum(1 for i in served if i % 2 == 1) / len(served)
    assert 0.20 <= share <= 0.30  # a quarter to the int8 replica (1), by a seeded draw
    shares = summarize(result).precision_share
    assert abs(shares["int8"] - share) < 1e-9 and abs(shares["fp16"] + shares["int8"] - 1.0) < 1e-9


def test_int8_replicas_serve_the_same_load_with_a_shorter_tail():
    config = fleet_config(load_spec(SPEC))
    trace = periodic(12.0, 1800.0, 200)  # near the two replicas' capacity at the batch curve
    fp16 = summarize(simulate(replace(config, traffic=(("fp16", 100), ("int8", 0))), trace, Script({2.0: 2})))
    int8 = summarize(simulate(replace(config, traffic=(("fp16", 0), ("int8", 100))), trace, Script({2.0: 2})))
    # All on one replica either way; the int8 one decodes and prefills 1.4x as fast.
    assert fp16.precision_share == {"fp16": 1.0, "int8": 0.0} and int8.precision_share == {
        "fp16": 0.0,
        "int8": 1.0,
    }
    assert int8.first_token_p99 < fp16.first_token_p99 and int8.end_to_end_p50 < fp16.end_to_end_p50


def test_the_rules_shift_to_int8_under_load_and_back_when_it_clears():
    spec = load_spec(SPEC)
    policy = RulesPolicy(spec)
    busy, calm = periodic(30.0, 2 * HOUR, 200), periodic(2.0, 2 * HOUR, 200, start=2 * HOUR)
    trace = replace(
        busy,
        duration=4 * HOUR,
        arrivals=[*busy.arrivals, *calm.arrivals],
        prompt_tokens=[*busy.prompt_tokens, *calm.prompt_tokens],
        output_tokens=[*busy.output_tokens, *calm.output_tokens],
    )
    result = simulate(fleet_config(spec), trace, policy)
    shifts = [d for d in policy.decisions if d.action == "shift_traffic"]
    to_int8 = [d for d in shifts if dict(d.traffic_to)["int8"] > dict(d.traffic_from)["int8"]]
    back = [d for d in shifts if dict(d.traffic_to)["fp16"] > dict(d.traffic_from)["fp16"]]
    assert to_int8 and back, [decision_result(d) for d in shifts]
    # Each shift waits the cooldown after the one before, in either direction.
    times = sorted(a.time for a in policy.actions if a.action == "shift_traffic")
    assert all(b - a >= spec.autoscaling.shift_cooldown for a, b in zip(times, times[1:], strict=False))
    summary = summarize(result)
    assert summary.precision_share["int8"] > 0.5  # the busy half ran mostly on int8
    assert "tokens by precision" in table([summary]) and "int8 " in table([summary])


def test_the_draw_and_the_shares_are_plain_arithmetic():
    import random

    rng = random.Random(0)
    picks = [draw(rng, {"a": 90, "b": 10}) for _ in range(2000)]
    assert 0.07 < picks.count("b") / len(picks) < 0.13
    assert draw(rng, {"a": 0, "b": 0}) is None
    variants = sim_variants(load_spec(SPEC))
    assert precision_shares(variants, [0, 1, 1, -1], [10, 20, 30, 40], [True, True, False, False]) == {
        "fp16": 10 / 30, "int8": 20 / 30}  # fmt: skip
    assert precision_shares((), [0], [1], [True]) == {}
