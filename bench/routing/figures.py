"""The pure half of bench/routing: the trace, the floor, the figures per fleet and load, the table, the JSON.

Nothing here runs a fleet; :mod:`bench.routing.__main__` does, and hands the outcomes here.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from ascend_fleet.simulate.curve import BatchCurve
from ascend_fleet.simulate.traces import (
    OUTPUT_MEDIAN,
    OUTPUT_SIGMA,
    PROMPT_MEDIAN,
    PROMPT_RANGE,
    PROMPT_SIGMA,
)

REPLICAS = 2
SLOTS = 4
OUTPUT_SCALE = 1 / 8
SLOW = 1.0
REFERENCE_PROMPT_TOKENS = 512  # the simulated engine's prefill scale: first_token(b) per 512 prompt tokens
CLASS_ORDER = ("short", "medium", "long")


@dataclass(frozen=True)
class Request:
    at: float
    prompt: int
    output: int


@dataclass
class Outcome:
    cls: str
    status: int
    ttft: float | None
    total: float
    tokens: int


@dataclass
class Result:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class Figures:
    """One fleet at one load, over all its requests (``over_1s`` also per class)."""

    requests: int
    over_1s: float
    ttft_over_1s: float
    ttft_p50_s: float
    ttft_p99_s: float
    throughput_tok_s: float
    shed: int
    over_1s_by_class: dict[str, float]


def trace(seconds: float, rate: float, seed: int) -> list[Request]:
    """Poisson arrivals at ``rate``; prompts with the seeds' length mix, short answers (see the module doc)."""
    rng = random.Random(f"{seed}:routing")
    requests, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return requests
        prompt = min(max(round(rng.lognormvariate(math.log(PROMPT_MEDIAN), PROMPT_SIGMA)), PROMPT_RANGE[0]),
                     PROMPT_RANGE[1])  # fmt: skip
        output = max(4, round(rng.lognormvariate(math.log(OUTPUT_MEDIAN * OUTPUT_SCALE), OUTPUT_SIGMA)))
        requests.append(Request(t, prompt, min(output, 256)))


def fleet_rate(requests: list[Request], curve: BatchCurve) -> float:
    """Requests per second two full replicas serve for this mix: slots / (prefill + decode) per replica."""
    prefill = statistics.fmean(
        curve.first_token(SLOTS) * r.prompt / REFERENCE_PROMPT_TOKENS for r in requests
    )
    decode = statistics.fmean(r.output for r in requests) / curve.per_sequence_rate(SLOTS)
    return REPLICAS * SLOTS / (prefill + decode)


def service_time(request: Request, curve: BatchCurve) -> float:
    """A request's time alone on an idle engine (batch of one): its prefill, then its decode."""
    return curve.first_token(
        1
    ) * request.prompt / REFERENCE_PROMPT_TOKENS + request.output / curve.per_sequence_rate(1)


def floor(requests: list[Request], curve: BatchCurve) -> float:
    """The share of ``requests`` over 1 s on an idle fleet: service time alone, which no scheduling removes."""
    return sum(service_time(r, curve) > SLOW for r in requests) / len(requests) if requests else float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _share_over(outcomes: list[Outcome]) -> float:
    served = [o for o in outcomes if o.status == 200]
    return sum(o.total > SLOW for o in served) / len(served) if served else float("nan")


def figures(result: Result) -> Figures:
    """The figures of one fleet's run: shares over 1 s of what it served, TTFTs, throughput, shed."""
    served = [o for o in result.outcomes if o.status == 200]
    ttfts = [o.ttft for o in served if o.ttft is not None]
    return Figures(
        requests=len(result.outcomes),
        over_1s=_share_over(result.outcomes),
        ttft_over_1s=sum(t > SLOW for t in ttfts) / len(ttfts) if ttfts else float("nan"),
        ttft_p50_s=percentile(ttfts, 0.5),
        ttft_p99_s=percentile(ttfts, 0.99),
        throughput_tok_s=sum(o.tokens for o in served) / result.seconds if result.seconds else 0.0,
        shed=len(result.outcomes) - len(served),
        over_1s_by_class={c: _share_over([o for o in result.outcomes if o.cls == c]) for c in CLASS_ORDER},
    )


@dataclass(frozen=True)
class LoadRun:
    """Every fleet at one load, on one trace."""

    load: float
    floor: float
    fleets: dict[str, Figures]


def failures(runs: list[LoadRun]) -> list[str]:
    """What makes the run fail: a fleet that served nothing, or any figure that is not a number."""
    problems = []
    for run in runs:
        for name, f in run.fleets.items():
            if f.requests and f.shed == f.requests:
                problems.append(f"load {run.load:g}: fleet {name} served none of its {f.requests} requests")
            numbers = [f.over_1s, f.ttft_over_1s, f.ttft_p50_s, f.ttft_p99_s, f.throughput_tok_s]
            if any(math.isnan(x) for x in numbers):
                problems.append(f"load {run.load:g}: fleet {name} has figures that are not numbers")
        if math.isnan(run.floor):
            problems.append(f"load {run.load:g}: no requests, no floor")
    return problems


def report(runs: list[LoadRun], rates: dict[float, float]) -> str:
    """The table: per load, the floor and one row per fleet."""
    lines = [
        "| load | fleet | requests | over 1 s | over 1 s short / medium / long | first token over 1 s | "
        "TTFT p50 | TTFT p99 | throughput (tok/s) | shed |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        lines.append(f"| {run.load:g} | floor (idle fleet) | | {run.floor:.1%} | | | | | | |")
        for name, f in run.fleets.items():
            by_class = " / ".join(_percent(f.over_1s_by_class[c]) for c in CLASS_ORDER)
            lines.append(f"| {run.load:g} | {name} | {f.requests} | {f.over_1s:.1%} | {by_class} | "
                         f"{f.ttft_over_1s:.1%} | {f.ttft_p50_s:.2f} s | {f.ttft_p99_s:.2f} s | "
                         f"{f.throughput_tok_s:.0f} | {f.shed} |")  # fmt: skip
    lines += [
        "",
        "Arrival rates: " + ", ".join(f"{load:g} -> {rate:.1f} req/s" for load, rate in rates.items()),
    ]
    return "\n".join(lines)


def _percent(share: float) -> str:
    """A class without requests in a short trace has no share: shown as a dash, not ``nan``."""
    return "-" if math.isnan(share) else f"{share:.0%}"


def _number(value: float) -> float | None:
    """JSON has no NaN: a figure without requests is null."""
    return None if math.isnan(value) else value


def as_json(runs: list[LoadRun]) -> dict:
    """The figures as ``--json`` writes them (``loads[].fleets.<name>.<figure>``)."""
    return {
        "loads": [
            {
                "load": run.load,
                "floor": _number(run.floor),
                "fleets": {
                    name: {
                        "requests": f.requests,
                        "over_1s": _number(f.over_1s),
                        "over_1s_by_class": {c: _number(v) for c, v in f.over_1s_by_class.items()},
                        "ttft_over_1s": _number(f.ttft_over_1s),
                        "ttft_p50_s": _number(f.ttft_p50_s),
                        "ttft_p99_s": _number(f.ttft_p99_s),
                        "throughput_tok_s": f.throughput_tok_s,
                        "shed": f.shed,
                    }
                    for name, f in run.fleets.items()
                },
            }
            for run in runs
        ]
    }
