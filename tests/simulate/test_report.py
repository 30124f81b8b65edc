"""Summaries and the verdict compute what their names say."""

from __future__ import annotations

import math
from array import array

import pytest

from ascend_fleet.simulate.model import Result
from ascend_fleet.simulate.report import LOSE, TRADE_OFF, WIN, outcome, percentile, summarize, table


def result(first: list[float], e2e: list[float], npu_seconds: float = 3600.0 * 8, name: str = "p") -> Result:
    n = len(first)
    return Result(
        policy=name,
        trace="t",
        duration=100.0,
        npus_per_replica=8,
        arrivals=array("d", range(n)),
        output_tokens=[10] * n,
        first_token=array("d", first),
        end_to_end=array("d", e2e),
        served_by=array("i", [0] * n),
        failures={},
        npu_seconds=npu_seconds,
    )


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert math.isnan(percentile([], 50))


def test_summary_counts_failures_as_slow():
    nan = math.nan
    summary = summarize(result([0.1, 0.5, 2.0, nan], [1.0, 2.0, 3.0, nan]))
    assert (summary.requests, summary.completed, summary.failed) == (4, 3, 1)
    assert summary.slow_share == pytest.approx(2 / 4)  # one over a second, one never answered
    assert summary.tokens_per_second == pytest.approx(30 / 100.0)
    assert summary.npu_hours == pytest.approx(8.0)


def test_outcome_needs_no_loss_on_either_axis_to_win():
    cheap_fast = summarize(result([0.1] * 10, [1.0] * 10, npu_seconds=1000.0))
    dear_slow = summarize(result([2.0] * 10, [3.0] * 10, npu_seconds=2000.0))
    cheap_slow = summarize(result([2.0] * 10, [3.0] * 10, npu_seconds=1000.0))
    assert outcome(cheap_fast, dear_slow) == WIN
    assert outcome(dear_slow, cheap_fast) == LOSE
    assert outcome(cheap_slow, dear_slow) == WIN  # cheaper, equally slow
    assert outcome(cheap_slow, cheap_fast) == LOSE
    assert outcome(cheap_fast, cheap_slow) == WIN
    assert outcome(dear_slow, cheap_slow) == LOSE
    assert outcome(summarize(result([0.1] * 10, [1.0] * 10, npu_seconds=2000.0)), cheap_slow) == TRADE_OFF


def test_table_has_a_column_per_figure_and_a_row_per_policy():
    text = table([summarize(result([0.1], [1.0], name="a")), summarize(result([0.2], [2.0], name="b"))])
    lines = text.splitlines()
    assert len(lines) == 4
    for column in (
        "TTFT p50",
        "TTFT p99",
        "E2E p50",
        "E2E p99",
        ">1s",
        "req/s",
        "tok/s",
        "NPU-h",
        "scale +/-",
        "restarts rule/OOM",
        "failed",
    ):
        assert column in lines[0]
    assert lines[2].startswith("| a ") and lines[3].startswith("| b ")
