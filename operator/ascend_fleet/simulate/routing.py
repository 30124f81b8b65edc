"""The routing table: the five routing layers at four loads on one mixed-length trace, and its floor.

``ascend-fleet simulate --routing`` runs here; ``python -m bench.routing`` runs the same trace, loads and table on
the real control plane with the upstream picker and Envoy, and takes its trace, floor, figures and table from
this module, so the two print the same columns and JSON keys.

The trace has the seeds' prompt mix (log-normal, median 512 tokens, as every simulator trace) with answers an
eighth of the simulator's (median 25 tokens): a request's own decode stays under a second, so the time over one
second is mostly waiting, the seeds' "requests slower than 1 s". Arrivals are Poisson at a load times what the
fleet serves. The **floor** of a load is the share of the same requests over 1 s each alone on an idle engine
(prefill and decode at batch one): no routing removes it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..api.policy import Routing
from .curve import BatchCurve
from .flow import ROUTINGS, RoutingChoice
from .model import EngineModel, FleetConfig, Result, simulate
from .policies import StaticPolicy
from .report import percentile
from .traces import OUTPUT_MEDIAN, OUTPUT_SIGMA, PROMPT_MEDIAN, PROMPT_RANGE, PROMPT_SIGMA, Trace

LOADS = (0.5, 0.75, 0.9, 1.05)
SLOTS = 4
OUTPUT_SCALE = 1 / 8
OUTPUT_LIMIT = 256
SLOW = 1.0
# The engines' prefill scale: first_token(b) per this many prompt tokens (the model's and the dev engines').
_REFERENCE_PROMPT = EngineModel().reference_prompt_tokens
CLASS_ORDER = ("short", "medium", "long")
# The client's own limit in bench/routing (its HTTP session gives up after 600 s): the engines never drop a
# request, only the picker sheds.
CLIENT_TIMEOUT = 600.0
# The seeds' classes, by which every fleet's requests are reported (whatever classes the fleet itself has).
SEEDS_ROUTING = Routing(mode="inferencePool")


def routing_trace(seconds: float, rate: float, seed: int) -> Trace:
    """Poisson arrivals at ``rate`` per second for ``seconds``; the seeds' prompts, short answers."""
    rng = random.Random(f"{seed}:routing")
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return Trace("routing", seconds, arrivals, prompts, outputs)
        prompt = round(rng.lognormvariate(math.log(PROMPT_MEDIAN), PROMPT_SIGMA))
        output = max(4, round(rng.lognormvariate(math.log(OUTPUT_MEDIAN * OUTPUT_SCALE), OUTPUT_SIGMA)))
        arrivals.append(t)
        prompts.append(min(max(prompt, PROMPT_RANGE[0]), PROMPT_RANGE[1]))
        outputs.append(min(output, OUTPUT_LIMIT))


def fleet_rate(trace: Trace, curve: BatchCurve, replicas: int, slots: int = SLOTS) -> float:
    """Requests per second ``replicas`` full engines serve for this mix: slots / (prefill + decode) each."""
    prefill = statistics.fmean(curve.first_token(slots) * p / _REFERENCE_PROMPT for p in trace.prompt_tokens)
    decode = statistics.fmean(trace.output_tokens) / curve.per_sequence_rate(slots)
    return replicas * slots / (prefill + decode)


def service_time(prompt: int, output: int, curve: BatchCurve) -> float:
    """A request's time alone on an idle engine (batch of one): its prefill, then its decode."""
    prefill = curve.first_token(1) * prompt / _REFERENCE_PROMPT
    return prefill + output / curve.per_sequence_rate(1)


def floor(trace: Trace, curve: BatchCurve) -> float:
    """The share of the trace's requests over 1 s on an idle fleet: service time alone, which no routing removes."""
    if not len(trace):
        return math.nan
    pairs = zip(trace.prompt_tokens, trace.output_tokens, strict=True)
    return sum(service_time(p, o, curve) > SLOW for p, o in pairs) / len(trace)


@dataclass(frozen=True)
class Figures:
    """One fleet at one load, over all its requests (``over_1s`` also per class)."""

    requests: int
    over_1s: float
    """Share of served requests whose last token came more than 1 s after they were sent."""
    ttft_over_1s: float
    ttft_p50_s: float
    ttft_p99_s: float
    throughput_tok_s: float
    shed: int
    """Requests not served: refused or expired at the picker (any answer but 200 in bench/routing)."""
    over_1s_by_class: dict[str, float]


@dataclass(frozen=True)
class Served:
    """One request as a client sees it: its seeds' class, whether served, its first-token and total seconds."""

    cls: str
    served: bool
    ttft: float | None
    total: float
    tokens: int


def figures_of(served: Sequence[Served], seconds: float) -> Figures:
    """The figures of one fleet's run: shares over 1 s of what it served, TTFTs, throughput, shed."""
    done = [s for s in served if s.served]
    ttfts = sorted(s.ttft for s in done if s.ttft is not None)
    return Figures(
        requests=len(served),
        over_1s=_share_over(done),
        ttft_over_1s=sum(t > SLOW for t in ttfts) / len(ttfts) if ttfts else math.nan,
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p99_s=percentile(ttfts, 99),
        throughput_tok_s=sum(s.tokens for s in done) / seconds if seconds else 0.0,
        shed=len(served) - len(done),
        over_1s_by_class={c: _share_over([s for s in done if s.cls == c]) for c in CLASS_ORDER},
    )


def _share_over(done: Sequence[Served]) -> float:
    return sum(s.total > SLOW for s in done) / len(done) if done else math.nan


def seeds_class(prompt_tokens: int) -> str:
    """The seeds' class of a prompt (short, medium, long), by which every fleet is reported."""
    cls = SEEDS_ROUTING.class_for(prompt_tokens)
    return cls.name if cls is not None else CLASS_ORDER[0]


def served_of(result: Result, trace: Trace) -> tuple[list[Served], float]:
    """A simulated run as the client sees it, and its span: from the first send to the last token."""
    served, end = [], 0.0
    for i, arrival in enumerate(trace.arrivals):
        total, ttft = result.end_to_end[i], result.first_token[i]
        ok = total == total  # NaN: shed, never served
        if ok:
            end = max(end, arrival + total)
        served.append(Served(seeds_class(trace.prompt_tokens[i]), ok, ttft if ok else None, total,
                             trace.output_tokens[i] if ok else 0))  # fmt: skip
    return served, end


@dataclass(frozen=True)
class LoadRun:
    """Every fleet at one load, on one trace."""

    load: float
    floor: float
    fleets: dict[str, Figures]


def routing_config(replicas: int, routing: RoutingChoice, engine: EngineModel | None = None) -> FleetConfig:
    """A fixed fleet of ``replicas`` engines with ``SLOTS`` batch slots each, behind one routing."""
    engine = replace(engine or EngineModel(), max_batch=SLOTS, request_timeout=CLIENT_TIMEOUT)
    return FleetConfig(engine=engine, initial_replicas=replicas, min_replicas=replicas, max_replicas=replicas,
                       routing=routing)  # fmt: skip


def run_routing(
    replicas: int,
    seconds: float,
    seed: int,
    loads: Sequence[float] = LOADS,
    fleets: Sequence[RoutingChoice] = ROUTINGS,
    engine: EngineModel | None = None,
) -> tuple[list[LoadRun], dict[float, float]]:
    """Every fleet at every load on one trace per load; and the arrival rate of each load."""
    curve = (engine or EngineModel()).curve
    capacity = fleet_rate(routing_trace(600, 10.0, seed), curve, replicas)
    rates = {load: load * capacity for load in loads}
    runs = []
    for load in loads:
        trace = routing_trace(seconds, rates[load], seed)
        figures: dict[str, Figures] = {}
        for routing in fleets:
            result = simulate(routing_config(replicas, routing, engine), trace, StaticPolicy(replicas))
            figures[routing] = figures_of(*served_of(result, trace))
        runs.append(LoadRun(load, floor(trace, curve), figures))
    return runs, rates


def routing_report(runs: Sequence[LoadRun], rates: dict[float, float]) -> str:
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


def as_json(runs: Sequence[LoadRun]) -> dict:
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
