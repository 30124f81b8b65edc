"""bench/routing's figures: the floor, the shares, the JSON keys, and what fails the run."""

from __future__ import annotations

import json
import math

from bench.routing.figures import (
    LoadRun,
    Outcome,
    Request,
    Result,
    as_json,
    failures,
    figures,
    floor,
    routing_report,
)

from ascend_fleet.simulate.curve import BatchCurve
from ascend_fleet.simulate.routing import service_time
from ascend_fleet.simulate.traces import Trace


def test_floor_is_the_share_over_one_second_alone_on_an_idle_engine():
    curve = BatchCurve()
    quick, slow = Request(0.0, 64, 8), Request(0.0, 512, 60)
    assert (
        service_time(quick.prompt, quick.output, curve) < 1.0 < service_time(slow.prompt, slow.output, curve)
    )
    requests = [quick, quick, quick, slow]
    trace = Trace(
        "t", 1.0, [r.at for r in requests], [r.prompt for r in requests], [r.output for r in requests]
    )
    assert floor(trace, curve) == 0.25


def served(cls: str, total: float, ttft: float = 0.1) -> Outcome:
    return Outcome(cls, 200, ttft, total, 10)


def test_figures_count_what_was_served():
    outcomes = [served("short", 0.5), served("long", 2.0, ttft=1.5), Outcome("short", 503, None, 0.01, 0)]
    f = figures(Result("pool", outcomes, seconds=2.0))
    assert (f.requests, f.shed, f.over_1s, f.ttft_over_1s, f.throughput_tok_s) == (3, 1, 0.5, 0.5, 10.0)
    assert f.over_1s_by_class["short"] == 0.0 and f.over_1s_by_class["long"] == 1.0
    assert math.isnan(f.over_1s_by_class["medium"])  # no medium request in this trace


def test_a_fleet_that_serves_nothing_fails_the_run():
    shed_all = figures(Result("pool", [Outcome("short", 503, None, 0.01, 0)] * 4, seconds=1.0))
    fine = figures(Result("service", [served("short", 0.5)], seconds=1.0))
    problems = failures([LoadRun(0.9, 0.1, {"service": fine, "pool": shed_all})])
    assert any("pool served none of its 4" in p for p in problems)
    assert any("pool has figures that are not numbers" in p for p in problems)
    assert failures([LoadRun(0.9, 0.1, {"service": fine})]) == []


def test_json_has_the_keys_and_no_nan():
    run = LoadRun(0.5, 0.2, {"service": figures(Result("service", [served("short", 1.5)], seconds=1.0))})
    written = json.loads(json.dumps(as_json([run]), allow_nan=False))
    fleet = written["loads"][0]["fleets"]["service"]
    assert written["loads"][0]["load"] == 0.5 and written["loads"][0]["floor"] == 0.2
    assert {"over_1s", "ttft_over_1s", "ttft_p99_s", "throughput_tok_s", "shed"} <= fleet.keys()
    assert fleet["over_1s"] == 1.0 and fleet["over_1s_by_class"]["long"] is None


def test_report_prints_no_nan_for_a_class_without_requests():
    run = LoadRun(0.5, 0.2, {"service": figures(Result("service", [served("short", 0.5)], seconds=1.0))})
    table = routing_report([run], {0.5: 5.0})
    assert "nan" not in table and "| 0.5 | service | 1 | 0.0% | 0% / - / - |" in table
