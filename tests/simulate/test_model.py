"""The engine model against its batch-size curve, cold starts and determinism."""

from __future__ import annotations

import math

import pytest

from ascend_fleet.simulate import (
    BatchCurve,
    EngineModel,
    FleetConfig,
    StaticPolicy,
    run_all,
    simulate,
    summarize,
)
from ascend_fleet.simulate.model import Result
from ascend_fleet.simulate.run import load_spec
from ascend_fleet.simulate.traces import BUILT_IN, HOUR, Trace, generate

from .support import Script, burst, periodic

CURVE = BatchCurve()
ENGINE = EngineModel(max_batch=32)


def one_replica(engine: EngineModel = ENGINE, **changes) -> FleetConfig:
    return FleetConfig(engine=engine, initial_replicas=1, **changes)


def test_the_seed_ladder_is_the_default_curve():
    assert CURVE.throughput(32) == 1550 and CURVE.first_token(128) == pytest.approx(0.450)
    assert CURVE.throughput(24) == pytest.approx((890 + 1550) / 2)  # linear between rungs
    assert CURVE.per_sequence_rate(2) == pytest.approx(180 / 4)  # below the first rung: the first rung's rate


def test_a_fixed_batch_gets_the_curves_first_token_latency_utilization_and_rate():
    batch, output = 16, 2000
    result = simulate(one_replica(), burst(batch, output, duration=120.0), StaticPolicy(1))

    # The k-th request joins a batch of k+1 and waits for the prefill at that size.
    for k in range(batch):
        assert result.first_token[k] == pytest.approx(CURVE.first_token(k + 1), rel=1e-12)
    # The first scrape falls while all 16 run: utilization is their share of full-batch throughput.
    assert result.timeline[0].utilization == pytest.approx(CURVE.throughput(batch) / CURVE.throughput(32))
    # Until the first one finishes, every sequence decodes at throughput(16) / 16 tokens per second; the
    # prefill takes its share of the batch like decode work (first-token time x rate at that size).
    work = min(output + CURVE.first_token(k + 1) * CURVE.per_sequence_rate(k + 1) for k in range(batch))
    assert min(result.end_to_end) == pytest.approx(work / CURVE.per_sequence_rate(batch), rel=1e-9)


def steady_batch(rate: float, output: int) -> float:
    """The batch size at which the curve's throughput equals the offered decode work (fixed point)."""
    batch = 1.0
    for _ in range(200):
        work = rate * (output + CURVE.first_token(batch) * CURVE.per_sequence_rate(batch))
        low, high = 0.0, 32.0  # invert the increasing throughput curve by bisection
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if CURVE.throughput(middle) < work else (low, middle)
        batch = (low + high) / 2
    return batch


def test_a_fixed_load_settles_where_the_curve_says():
    rate, output = 4.0, 200
    result = simulate(one_replica(), periodic(rate, 1800.0, output), StaticPolicy(1))
    batch = steady_batch(rate, output)
    assert 8 < batch < 16  # the regime this test means to check

    settled = [p.utilization for p in result.timeline if p.time > 600]
    expected_utilization = CURVE.throughput(batch) / CURVE.throughput(32)
    assert sum(settled) / len(settled) == pytest.approx(expected_utilization, rel=0.02)

    late = [i for i, t in enumerate(result.arrivals) if t > 600]
    mean_e2e = sum(result.end_to_end[i] for i in late) / len(late)
    assert mean_e2e == pytest.approx(batch / rate, rel=0.03)  # Little's law at the curve's batch
    mean_first = sum(result.first_token[i] for i in late) / len(late)
    assert mean_first == pytest.approx(CURVE.first_token(batch), rel=0.05)


def test_cold_start_delays_the_new_replicas_capacity_by_exactly_the_configured_time():
    cold_start, scale_at = 123.0, 60.0
    engine = EngineModel(max_batch=32, cold_start=cold_start)
    # 10 req/s of 200 tokens overloads one replica (1550 tokens/s), so the new one is used at once.
    trace = periodic(10.0, 400.0, 200)
    result = simulate(one_replica(engine), trace, Script({scale_at: 2}))

    ready = scale_at + cold_start
    new = [life for life in result.lives if life.index == 1]
    assert [(life.created, life.ready_at) for life in new] == [(scale_at, ready)]
    # First tokens from the new replica: none before it is ready, and at once then (the picker was holding
    # the overflow, so the new replica fills as soon as it serves).
    first_tokens = [t + ttft for t, ttft, replica in
                    zip(result.arrivals, result.first_token, result.served_by, strict=True) if replica == 1]  # fmt: skip
    assert ready <= min(first_tokens) <= ready + 1.0
    # Billing starts at creation: cold start costs NPUs.
    assert result.npu_seconds == pytest.approx((400.0 + (400.0 - scale_at)) * 8)


def same(a: Result, b: Result) -> bool:
    return (
        a.first_token.tobytes() == b.first_token.tobytes()
        and a.end_to_end.tobytes() == b.end_to_end.tobytes()
        and a.timeline == b.timeline
        and summarize(a) == summarize(b)
    )


def test_the_same_seed_gives_the_same_numbers_and_another_seed_does_not():
    spec = load_spec()
    shape = BUILT_IN["bursty"]
    policies = ("hpa", "rules")
    first = run_all(spec, generate(shape, HOUR, seed=5), policies)
    again = run_all(spec, generate(shape, HOUR, seed=5), policies)
    other = run_all(spec, generate(shape, HOUR, seed=6), policies)
    assert all(same(a, b) for a, b in zip(first, again, strict=True))
    assert not same(first[1], other[1])


def test_failed_requests_count_as_slow_and_have_no_latency():
    # No replica at all: every request fails with nowhere to go.
    result = simulate(
        FleetConfig(initial_replicas=0, min_replicas=0), periodic(1.0, 30.0, 10), StaticPolicy(0)
    )
    summary = summarize(result)
    assert summary.failed == summary.requests == 30 and summary.slow_share == 1.0
    assert math.isnan(summary.first_token_p50)
    assert result.failures == {"no serving replica": 30}


def test_fragmentation_slows_steps_past_its_level_then_crashes_the_engine():
    # Fragmentation grows 0.001 per second whatever the load: 0.30 at 300 s, 0.40 (out of memory) at 400 s.
    engine = EngineModel(
        max_batch=32, cold_start=100.0, fragmentation_idle_per_hour=3.6, fragmentation_busy_per_hour=3.6
    )
    assert (engine.penalty_start, engine.oom_fragmentation) == (0.15, 0.40)
    # A short request right after the scrape that saw 0.30, then one too long to finish before the crash.
    trace = Trace("two", 600.0, [300.0, 301.0], [512, 512], [20, 100_000])
    result = simulate(one_replica(engine), trace, StaticPolicy(1))

    slowdown = 1 + (0.30 - 0.15) * engine.slowdown_per_fragmentation
    assert result.first_token[0] == pytest.approx(CURVE.first_token(1) * slowdown)
    crash = 405.0  # the first scrape at or past 0.40
    assert [(life.created, life.deleted, life.end) for life in result.lives][:1] == [
        (0.0, crash, "out of memory")
    ]
    assert result.oom_crashes == 1 and result.failures == {"lost in an out-of-memory crash": 1}
    new = result.lives[1]
    assert (new.created, new.ready_at) == (crash, crash + engine.cold_start)
