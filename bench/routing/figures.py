"""The pure half of bench/routing: the requests of a trace, the client's outcomes, the figures per fleet and load.

Nothing here runs a fleet; :mod:`bench.routing.__main__` does, and hands the outcomes here. The trace, the floor,
the figures, the table and the JSON are the fleet simulator's (``ascend_fleet.simulate.routing``), so
``ascend-fleet simulate --routing`` prints the same columns at fleet scale.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ascend_fleet.simulate.report import percentile
from ascend_fleet.simulate.routing import (
    SLOTS,
    SLOW,
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
BASELINE = "service"
# Words that open every real prompt with a random run of two words, so no two requests share a cached prefix.
UNIQUE_PREFIX = 32


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


def e2e_p99(result: Result) -> float:
    """The 99th percentile of the served requests' end-to-end seconds (NaN when none was served)."""
    return percentile(sorted(o.total for o in result.outcomes if o.status == 200), 99)


def fitted(trace: Trace, context: int) -> Trace:
    """The trace with every prompt cut so that prompt and answer fit ``context`` tokens (a real model's)."""
    prompts = [min(p, context - o) for p, o in zip(trace.prompt_tokens, trace.output_tokens, strict=True)]
    return Trace(trace.name, trace.duration, list(trace.arrivals), prompts, list(trace.output_tokens))


def completion_body(request: Request, model: str, real: bool = False) -> dict:
    """The streamed completion a request sends: a prompt of ``request.prompt`` words.

    For the simulated engines a word is a token; the prompt opens with a random hex word (so no two requests
    share a prefix), then ``w``. For the real tiny model the words are ``w`` and ``the``, each one token of its
    tokenizer after the first (bench/routing/real.py checks that with vLLM's ``/tokenize``): a random run of
    ``UNIQUE_PREFIX`` of them opens the prompt, then ``w``; ``ignore_eos`` makes every answer
    ``request.output`` tokens long, as the simulated engines' answers are. The picker takes text prompts only.
    """
    body: dict = {"model": model, "max_tokens": request.output, "stream": True}
    if not real:
        body["prompt"] = " ".join([uuid.uuid4().hex, *["w"] * (request.prompt - 1)])
        return body
    rng = random.Random(uuid.uuid4().int)
    # ``the`` is one token only after a space: the prompt's first word is always ``w``.
    opening = ["w", *(rng.choice(("w", "the")) for _ in range(UNIQUE_PREFIX - 1))][: request.prompt]
    body["prompt"] = " ".join([*opening, *["w"] * (request.prompt - len(opening))])
    body["ignore_eos"] = True
    return body


@dataclass(frozen=True)
class Against:
    """The idle fleet of one load: its share over 1 s (the floor) and its end-to-end p99 on the same requests."""

    floor: float
    idle_p99: float


def against_of(idle_seconds: Sequence[float]) -> Against:
    """The idle fleet from each request's end-to-end seconds alone on an idle engine (computed or measured)."""
    if not idle_seconds:
        return Against(math.nan, math.nan)
    return Against(
        sum(t > SLOW for t in idle_seconds) / len(idle_seconds), percentile(sorted(idle_seconds), 99)
    )


def _ratio(mine: float, theirs: float) -> str:
    if math.isnan(mine) or math.isnan(theirs) or theirs == 0:
        return "-"
    return f"{mine / theirs:.2f}x"


def ratio_report(
    runs: Sequence[LoadRun],
    p99: Mapping[tuple[float, str], float],
    idle: Mapping[float, Against],
    baseline: str = BASELINE,
) -> str:
    """Per load and fleet: the share over 1 s against the baseline fleet's and the floor's, and the
    end-to-end p99 against the idle fleet's on the same requests (``-`` where a ratio has no divisor)."""
    lines = [
        f"| load | fleet | over 1 s | / {baseline} | / floor | E2E p99 | / idle E2E p99 |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        base = run.fleets.get(baseline)
        against = idle[run.load]
        lines.append(f"| {run.load:g} | floor (idle fleet) | {against.floor:.1%} | | | "
                     f"{against.idle_p99:.2f} s | |")  # fmt: skip
        for name, f in run.fleets.items():
            mine = p99[(run.load, name)]
            lines.append(f"| {run.load:g} | {name} | {f.over_1s:.1%} | "
                         f"{_ratio(f.over_1s, base.over_1s) if base else '-'} | {_ratio(f.over_1s, against.floor)} | "
                         f"{mine:.2f} s | {_ratio(mine, against.idle_p99)} |")  # fmt: skip
    return "\n".join(lines)


@dataclass
class Repeats:
    """Every run of each fleet at each load on the same trace: the figures and the end-to-end p99 of each run.

    The same trace replayed again differs only by what the machine did meanwhile (scheduling, the picker's
    scrapes, the engines' timers), so the spread of one cell is the noise a single run's figure carries.
    """

    cells: dict[tuple[float, str], list[tuple[Figures, float]]] = field(default_factory=dict)

    def add(self, load: float, fleet: str, result: Result) -> None:
        self.cells.setdefault((load, fleet), []).append((figures(result), e2e_p99(result)))

    def median(self, load: float, fleet: str) -> tuple[Figures, float]:
        """The run whose share over 1 s is the median one (the lower of the two middle runs for an even count)."""
        runs = sorted(self.cells[(load, fleet)], key=lambda run: run[0].over_1s)
        return runs[(len(runs) - 1) // 2]

    def shares(self, load: float, fleet: str) -> list[float]:
        """The share over 1 s of every run, in the order they ran."""
        return [f.over_1s for f, _ in self.cells[(load, fleet)]]

    def load_runs(
        self, floors: Mapping[float, float]
    ) -> tuple[list[LoadRun], dict[tuple[float, str], float]]:
        """Per load, each fleet's median run (the tables' figures) and those runs' end-to-end p99."""
        runs, p99 = [], {}
        for load, floor_share in floors.items():
            fleets = {}
            for (cell_load, fleet), _ in self.cells.items():
                if cell_load == load:
                    fleets[fleet], p99[(load, fleet)] = self.median(load, fleet)
            runs.append(LoadRun(load, floor_share, fleets))
        return runs, p99


def spread(shares: Sequence[float]) -> float:
    """How far apart the runs of one cell landed: the largest share over 1 s less the smallest."""
    return max(shares) - min(shares)


def spread_report(repeats: Repeats) -> str:
    """Per load and fleet: the share over 1 s of every run, the median the tables show, and the spread."""
    lines = ["| load | fleet | over 1 s, each run | median | spread |", "|---:|---|---|---:|---:|"]
    for (load, fleet), _ in repeats.cells.items():
        shares = repeats.shares(load, fleet)
        each = " / ".join(f"{share:.1%}" for share in shares)
        lines.append(f"| {load:g} | {fleet} | {each} | {repeats.median(load, fleet)[0].over_1s:.1%} | "
                     f"{spread(shares) * 100:.1f} pt |")  # fmt: skip
    return "\n".join(lines)


def with_spread(document: dict, repeats: Repeats) -> dict:
    """``as_json``'s document with each fleet's ``over_1s_runs`` (every run's share) and ``over_1s_spread``."""
    for entry in document["loads"]:
        for fleet, figures_of_fleet in entry["fleets"].items():
            shares = repeats.shares(entry["load"], fleet)
            figures_of_fleet["over_1s_runs"] = shares
            figures_of_fleet["over_1s_spread"] = spread(shares)
    return document
