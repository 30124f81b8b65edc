"""bench/routing's figures: the floor, the shares, the JSON keys, and what fails the run; the arguments, prompts,
ratios and objects of its run on real engines (without starting one)."""

from __future__ import annotations

import json
import math

import pytest
from bench.routing.__main__ import FLEETS, parse_args
from bench.routing.figures import (
    UNIQUE_PREFIX,
    LoadRun,
    Outcome,
    Repeats,
    Request,
    Result,
    against_of,
    as_json,
    completion_body,
    e2e_p99,
    failures,
    figures,
    fitted,
    floor,
    ratio_report,
    routing_report,
    spread,
    spread_report,
    with_spread,
)
from bench.routing.fleets import ADAPTIVE_MIN_BATCH, SLOTS, classified, spec_doc
from bench.routing.real import fleet_objects

from ascend_fleet.render import validate
from ascend_fleet.render.picker_config import ADAPTIVE_LIMIT, picker_config
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


def test_engines_vllm_runs_the_four_fleets_on_both_kinds_by_default():
    simulated = parse_args([])
    assert simulated.engines == "simulated" and simulated.fleets == list(FLEETS) and len(FLEETS) == 6
    real = parse_args(["--engines", "vllm", "--loads", "0.5,0.9", "--real-seconds", "30"])
    assert real.fleets == real.real_fleets == ["service", "pool", "pool+classes", "pool+adaptive"]
    assert real.loads == [0.5, 0.9] and real.real_seconds == 30.0


def test_unknown_fleets_and_a_real_run_without_its_baseline_are_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--fleets", "service,pools"])
    assert "unknown fleet pools" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--engines", "vllm", "--real-fleets", "pool,pool+classes"])
    assert "must include service" in capsys.readouterr().err


def test_real_prompts_are_their_words_and_never_share_a_prefix():
    request = Request(0.0, 300, 12)
    first, second = completion_body(request, "qwen", real=True), completion_body(request, "qwen", real=True)
    words = first["prompt"].split()
    assert len(words) == 300 and set(words) <= {"w", "the"} and set(words[UNIQUE_PREFIX:]) == {"w"}
    assert first["prompt"].split()[:UNIQUE_PREFIX] != second["prompt"].split()[:UNIQUE_PREFIX]
    assert first["ignore_eos"] is True and first["max_tokens"] == 12 and first["stream"] is True
    simulated = completion_body(request, "qwen")
    assert len(simulated["prompt"].split()) == 300 and "ignore_eos" not in simulated


def test_a_fitted_trace_keeps_every_prompt_and_answer_inside_the_context():
    trace = Trace("t", 1.0, [0.1, 0.2], [5000, 100], [40, 8])
    cut = fitted(trace, 4096)
    assert cut.prompt_tokens == [4056, 100] and cut.output_tokens == [40, 8] and cut.arrivals == [0.1, 0.2]


def test_ratios_set_each_fleet_against_the_service_and_the_idle_fleet():
    against = against_of([0.5, 0.5, 2.0, 0.5])
    assert against.floor == 0.25 and against.idle_p99 == 2.0
    service = figures(Result("service", [served("short", 2.0), served("short", 0.5)], seconds=1.0))
    pool = figures(Result("pool", [served("short", 0.5), served("short", 0.5), served("short", 1.5),
                                   served("short", 0.4)], seconds=1.0))  # fmt: skip
    run = LoadRun(0.9, against.floor, {"service": service, "pool": pool})
    table = ratio_report([run], {(0.9, "service"): 2.0, (0.9, "pool"): 3.0}, {0.9: against})
    assert "| 0.9 | floor (idle fleet) | 25.0% | | | 2.00 s | |" in table
    assert "| 0.9 | service | 50.0% | 1.00x | 2.00x | 2.00 s | 1.00x |" in table
    assert "| 0.9 | pool | 25.0% | 0.50x | 1.00x | 3.00 s | 1.50x |" in table
    idle = {0.9: against_of([0.2, 0.3])}  # nothing over 1 s alone: no ratio to the floor
    assert "| 0.9 | pool | 25.0% | 0.50x | - |" in ratio_report(
        [run], {(0.9, "service"): 2.0, (0.9, "pool"): 3.0}, idle
    )


def test_the_real_fleets_share_one_set_of_objects_with_every_fleets_objective():
    objects = fleet_objects("bench-vllm")
    objectives = {o["metadata"]["name"] for o in objects if o["kind"] == "InferenceObjective"}
    assert objectives == {"llm-all", "llm-short", "llm-medium", "llm-long"}
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert len(pods) == 2 and all(
        "--max-num-seqs" in " ".join(p["spec"]["containers"][0]["command"]) for p in pods
    )
    assert e2e_p99(Result("service", [served("short", 0.5), Outcome("short", 503, None, 9.0, 0)])) == 0.5


def result_over(share_over: float, requests: int = 10) -> Result:
    """A run in which ``share_over`` of ``requests`` served requests took more than 1 s."""
    slow = round(share_over * requests)
    return Result("pool", [served("short", 2.0 if i < slow else 0.5) for i in range(requests)], seconds=5.0)


def test_repeats_show_each_cells_median_run_and_every_runs_share():
    repeats = Repeats()
    for share in (0.6, 0.2, 0.4):
        repeats.add(0.9, "service", result_over(share))
    repeats.add(0.9, "pool", result_over(0.1))
    repeats.add(0.9, "pool", result_over(0.3))
    assert repeats.shares(0.9, "service") == [0.6, 0.2, 0.4]  # in the order they ran
    assert repeats.median(0.9, "service")[0].over_1s == 0.4
    assert repeats.median(0.9, "pool")[0].over_1s == 0.1  # the lower middle run of an even count
    runs, p99 = repeats.load_runs({0.9: 0.05})
    assert [(r.load, r.floor, list(r.fleets)) for r in runs] == [(0.9, 0.05, ["service", "pool"])]
    assert runs[0].fleets["service"].over_1s == 0.4 and p99[(0.9, "service")] == 2.0
    assert spread(repeats.shares(0.9, "service")) == pytest.approx(0.4)
    table = spread_report(repeats)
    assert "| 0.9 | service | 60.0% / 20.0% / 40.0% | 40.0% | 40.0 pt |" in table
    document = with_spread(as_json(runs), repeats)
    service = document["loads"][0]["fleets"]["service"]
    assert service["over_1s"] == 0.4 and service["over_1s_runs"] == [0.6, 0.2, 0.4]
    assert service["over_1s_spread"] == pytest.approx(0.4)


def test_runs_default_to_three_and_must_be_at_least_one():
    assert parse_args([]).runs == 3
    assert parse_args(["--runs", "1"]).runs == 1
    with pytest.raises(SystemExit):
        parse_args(["--runs", "0"])


def test_the_adaptive_fleet_is_the_one_class_pool_with_the_adaptive_limit():
    pool, adaptive = (validate(spec_doc("bench", mode)).obj.spec for mode in ("pool", "pool+adaptive"))
    assert adaptive.routing == pool.routing and not classified("pool+adaptive") and classified("pool+classes")
    assert adaptive.batching.max_batch_size == pool.batching.max_batch_size == SLOTS
    (plugin,) = [p for p in picker_config(adaptive)["plugins"] if p["type"] == ADAPTIVE_LIMIT]
    assert plugin["parameters"] == {
        "minBatchSize": ADAPTIVE_MIN_BATCH,
        "maxBatchSize": SLOTS,
        "ttftTargetMs": 500,
    }
    assert not [p for p in picker_config(pool)["plugins"] if p["type"] == ADAPTIVE_LIMIT]
