"""Traces: built-in shapes are seeded and follow their rate; CSV files load with clear errors."""

from __future__ import annotations

import random

import pytest

from ascend_fleet.simulate.traces import BUILT_IN, HOUR, generate, load_csv, trace_by_name


def test_built_in_traces_are_reproducible_and_sorted():
    for name in BUILT_IN:
        a = trace_by_name(name, HOUR / 4, seed=3)
        assert a == trace_by_name(name, HOUR / 4, seed=3)
        assert a.arrivals == sorted(a.arrivals) and all(0 <= t < HOUR / 4 for t in a.arrivals)
        assert a != trace_by_name(name, HOUR / 4, seed=4)


def test_steady_trace_has_its_rate():
    trace = generate(BUILT_IN["steady"], HOUR, seed=1)
    assert trace.mean_rate() == pytest.approx(12.0, rel=0.03)  # 43,200 expected: Poisson noise is ~0.5 %


def test_diurnal_rate_peaks_in_the_afternoon_and_bottoms_at_night():
    rate, peak = BUILT_IN["diurnal"].build(24 * HOUR, random.Random(0))
    hourly = [rate(h * HOUR) for h in range(24)]
    assert peak == max(hourly) == rate(14 * HOUR) == pytest.approx(20.0)
    assert min(hourly) == rate(2 * HOUR) == pytest.approx(3.0)


def test_bursts_come_from_the_seed_and_reach_three_times_the_base():
    rates = [BUILT_IN["bursty"].build(24 * HOUR, random.Random(seed))[0] for seed in (1, 1, 2)]
    samples = [[r(t * 10.0) for t in range(8640)] for r in rates]
    assert samples[0] == samples[1] != samples[2]
    assert set(samples[0]) == {7.0, 21.0}


def test_csv_with_header_loads_sorted(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival,prompt_tokens,output_tokens\n2.5,100,20\n0.5,300,40\n")
    trace = load_csv(path)
    assert (trace.arrivals, trace.prompt_tokens, trace.output_tokens) == ([0.5, 2.5], [300, 100], [40, 20])
    assert trace.duration == 2.5 and trace.name == "trace"
    assert trace_by_name(str(path), 2.0, seed=0).arrivals == [0.5]  # --hours cuts the file


def test_csv_errors_name_the_row(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("1.0,10,5\n2.0,ten,5\n")
    with pytest.raises(
        ValueError, match=r"bad.csv:2: expected arrival seconds, prompt tokens, output tokens"
    ):
        load_csv(path)


def test_unknown_trace_lists_the_choices():
    with pytest.raises(ValueError, match="use one of steady, diurnal, bursty, flash-crowd or a .csv file"):
        trace_by_name("weekly", HOUR, 0)
