"""bench/pd's pure part: the trace, each request's TTFT and TPOT, a fleet's figures and the table."""

from __future__ import annotations

import math

from bench.pd.figures import Answer, figures, table, trace


def test_the_trace_is_one_trace_for_both_fleets():
    first, again = trace(), trace()
    assert first == again and len(first) == 24 and first[0].at == 0
    assert all(b.at > a.at for a, b in zip(first, first[1:], strict=False))


def test_ttft_and_tpot_of_one_answer():
    answer = Answer(sent=10.0, first=10.5, done=12.5, tokens=5)
    assert answer.ttft == 0.5 and answer.tpot == 0.5
    assert Answer(sent=1.0, first=1.2, done=1.2, tokens=1).tpot is None


def test_figures_count_failures_and_measure_only_answers():
    answers = [
        Answer(0.0, 0.1, 1.1, 11),
        Answer(1.0, 1.3, 2.3, 11),
        Answer(2.0, error="HTTP 503: prefill unreachable"),
    ]
    f = figures(answers)
    assert f.failed_requests == 1 and f.requests == 3
    assert math.isclose(f.ttft_p50_s, 0.2, abs_tol=0.11) and f.ttft_p99_s <= 0.3 + 1e-9
    assert math.isclose(f.tpot_p99_s, 0.1)
    assert math.isclose(f.throughput_tok_s, 22 / 2.3)


def test_a_fleet_with_no_answer_has_no_figures_but_its_failures():
    f = figures([Answer(0.0, error="refused")])
    assert f.failed_requests == 1 and math.isnan(f.ttft_p99_s) and math.isnan(f.throughput_tok_s)


def test_the_table_prints_the_floor_beside_each_fleet():
    idle = figures([Answer(0.0, 0.1, 0.5, 5)])
    busy = figures([Answer(0.0, 0.3, 1.1, 5)])
    text = table({"colocated": busy}, idle)
    assert "| floor (idle engine, one request) | 100 ms" in text
    assert "| colocated | 300 ms | 300 ms | 3.0x | 200 ms | 200 ms | 2.0x |" in text
