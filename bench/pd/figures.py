"""bench/pd's trace and figures (pure): what each request saw, summed up per fleet, printed beside the floor.

A request's time to first token (TTFT) runs from sending to the first streamed token; its time per output
token (TPOT) is the rest of the answer over the tokens after the first. Throughput is the output tokens of the
trace over the seconds from the first request sent to the last answer.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ascend_fleet.simulate.report import percentile

# One trace for both fleets: fresh prompts (kvproof.fresh_prompt: about 367 tokens of the tiny model, whole KV
# blocks to transfer and a remainder), short answers, arrivals of a Poisson process.
REQUESTS = 24
RATE = 1.0  # requests per second
OUTPUT_TOKENS = 24
SEED = 36


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the trace's start
    output: int  # tokens to generate


def trace(requests: int = REQUESTS, rate: float = RATE, seed: int = SEED) -> list[Arrival]:
    """The trace's arrivals: exponential gaps at ``rate``, every answer ``OUTPUT_TOKENS`` long."""
    rng, at, arrivals = random.Random(seed), 0.0, []
    for _ in range(requests):
        arrivals.append(Arrival(round(at, 3), OUTPUT_TOKENS))
        at += rng.expovariate(rate)
    return arrivals


@dataclass(frozen=True)
class Answer:
    """One request as the client saw it (``error`` set when it failed)."""

    sent: float  # monotonic seconds
    first: float | None = None  # first token
    done: float | None = None
    tokens: int = 0
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.sent

    @property
    def tpot(self) -> float | None:
        if self.first is None or self.done is None or self.tokens < 2:
            return None
        return (self.done - self.first) / (self.tokens - 1)


@dataclass(frozen=True)
class Figures:
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    throughput_tok_s: float
    failed_requests: int
    requests: int


def figures(answers: Sequence[Answer]) -> Figures:
    """A fleet's figures over its answers (NaN where no request succeeded)."""
    good = [a for a in answers if a.error is None and a.ttft is not None]
    ttft = sorted(a.ttft for a in good if a.ttft is not None)
    tpot = sorted(a.tpot for a in good if a.tpot is not None)
    span = (max(a.done for a in good if a.done) - min(a.sent for a in answers)) if good else 0.0
    return Figures(
        ttft_p50_s=percentile(ttft, 50) if ttft else math.nan,
        ttft_p99_s=percentile(ttft, 99) if ttft else math.nan,
        tpot_p50_s=percentile(tpot, 50) if tpot else math.nan,
        tpot_p99_s=percentile(tpot, 99) if tpot else math.nan,
        throughput_tok_s=sum(a.tokens for a in good) / span if span > 0 else math.nan,
        failed_requests=len(answers) - len(good),
        requests=len(answers),
    )


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


def _times(mine: float, floor: float) -> str:
    return "-" if math.isnan(mine) or math.isnan(floor) or floor == 0 else f"{mine / floor:.1f}x"


def table(fleets: dict[str, Figures], floor: Figures) -> str:
    """Per fleet: TTFT and TPOT p50/p99 (each also as a multiple of the floor's p50), throughput, failures; the
    floor is one request at a time on an idle engine."""
    lines = [
        "| fleet | TTFT p50 | TTFT p99 | / floor | TPOT p50 | TPOT p99 | / floor | throughput | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| floor (idle engine, one request) | {_ms(floor.ttft_p50_s)} | {_ms(floor.ttft_p99_s)} | | "
        f"{_ms(floor.tpot_p50_s)} | {_ms(floor.tpot_p99_s)} | | | {floor.failed_requests} |",
    ]
    for name, f in fleets.items():
        lines.append(
            f"| {name} | {_ms(f.ttft_p50_s)} | {_ms(f.ttft_p99_s)} | {_times(f.ttft_p99_s, floor.ttft_p50_s)} | "
            f"{_ms(f.tpot_p50_s)} | {_ms(f.tpot_p99_s)} | {_times(f.tpot_p99_s, floor.tpot_p50_s)} | "
            f"{f.throughput_tok_s:.1f} tok/s | {f.failed_requests} of {f.requests} |"
        )
    return "\n".join(lines)
