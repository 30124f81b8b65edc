"""The pure half of bench/routing: the requests of a trace, the client's outcomes, the figures per fleet and load.

Nothing here runs a fleet; :mod:`bench.routing.__main__` does, and hands the outcomes here. The trace, the floor,
the figures, the table and the JSON are the fleet simulator's (``ascend_fleet.simulate.routing``), so
``ascend-fleet simulate --routing`` prints the same columns at fleet scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ascend_fleet.simulate.routing import (
    SLOTS,
    Figures,
    LoadRun,
    Served,
    as_json,
    figures_of,
    fleet_rate,
    floor,
    routing_report,
    routing_trace,
)
from ascend_fleet.simulate.traces import Trace

__all__ = ["SLOTS", "LoadRun", "as_json", "fleet_rate", "floor", "routing_report", "routing_trace"]

REPLICAS = 2


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


def requests_of(trace: Trace) -> list[Request]:
    """The trace's requests, one per send."""
    return [Request(*r) for r in zip(trace.arrivals, trace.prompt_tokens, trace.output_tokens, strict=True)]


def figures(result: Result) -> Figures:
    """The figures of one fleet's run: a request is served when it was answered 200."""
    served = [Served(o.cls, o.status == 200, o.ttft, o.total, o.tokens) for o in result.outcomes]
    return figures_of(served, result.seconds)


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
