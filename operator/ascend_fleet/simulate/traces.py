"""Request traces: arrival time, prompt tokens and output tokens of every request, in arrival order.

Built-in traces are non-homogeneous Poisson processes (thinning against the trace's peak rate) with
log-normal prompt and output lengths, all drawn from ``random.Random`` streams seeded by the caller,
so a seed fixes every request. A CSV file gives the requests directly.
"""

from __future__ import annotations

import csv
import math
import random
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HOUR = 3600.0
DAY = 24 * HOUR

# Request lengths (log-normal): a median prompt of 512 tokens, a median answer of 200 (mean ~256).
PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_RANGE = 512.0, 0.8, (16, 8192)
OUTPUT_MEDIAN, OUTPUT_SIGMA, OUTPUT_RANGE = 200.0, 0.7, (8, 2048)


@dataclass(frozen=True)
class Trace:
    """Requests in arrival order, as three parallel lists, and the span they cover."""

    name: str
    duration: float
    arrivals: list[float]
    prompt_tokens: list[int]
    output_tokens: list[int]

    def __len__(self) -> int:
        return len(self.arrivals)

    def mean_rate(self) -> float:
        """Requests per second over the trace's span."""
        return len(self.arrivals) / self.duration if self.duration > 0 else 0.0


RateFunction = Callable[[float], float]


@dataclass(frozen=True)
class Shape:
    """A built-in trace: a request-rate curve (requests/s at time t) and its peak."""

    name: str
    description: str
    build: Callable[[float, random.Random], tuple[RateFunction, float]]


def steady_rate(level: float = 12.0) -> Callable[[float, random.Random], tuple[RateFunction, float]]:
    """Constant ``level`` requests/s."""
    return lambda duration, rng: ((lambda t: level), level)


def diurnal_rate(trough: float = 3.0, peak: float = 20.0, peak_hour: float = 14.0):
    """A day-long cosine from ``trough`` at night to ``peak`` at ``peak_hour`` (the run starts at midnight)."""

    def build(duration: float, rng: random.Random) -> tuple[RateFunction, float]:
        def rate(t: float) -> float:
            phase = 2 * math.pi * (t - peak_hour * HOUR) / DAY
            return trough + (peak - trough) * (1 + math.cos(phase)) / 2

        return rate, peak

    return build


def bursty_rate(
    base: float = 7.0,
    factor: float = 3.0,
    mean_gap: float = 45 * 60.0,
    burst_range: tuple[float, float] = (3 * 60.0, 12 * 60.0),
):
    """``base`` requests/s with bursts of ``factor`` times it, starting on average every ``mean_gap`` seconds
    and lasting a uniform draw from ``burst_range``; the bursts come from the seeded generator."""

    def build(duration: float, rng: random.Random) -> tuple[RateFunction, float]:
        bursts: list[tuple[float, float]] = []
        t = rng.expovariate(1.0 / mean_gap)
        while t < duration:
            length = rng.uniform(*burst_range)
            bursts.append((t, t + length))
            t += length + rng.expovariate(1.0 / mean_gap)

        starts = [start for start, _ in bursts]

        def rate(t: float) -> float:
            i = bisect_right(starts, t) - 1
            return base * factor if i >= 0 and t < bursts[i][1] else base

        return rate, base * factor

    return build


def flash_crowd_rate(
    base: float = 6.0,
    peak: float = 24.0,
    at_fraction: float = 0.4,
    rise: float = 120.0,
    hold: float = 30 * 60.0,
    decay: float = 30 * 60.0,
):
    """``base`` requests/s until ``at_fraction`` of the run, a ramp to ``peak`` over ``rise`` seconds,
    ``hold`` seconds there, then an exponential return to ``base`` with time constant ``decay``."""

    def build(duration: float, rng: random.Random) -> tuple[RateFunction, float]:
        start = at_fraction * duration

        def rate(t: float) -> float:
            if t < start:
                return base
            if t < start + rise:
                return base + (peak - base) * (t - start) / rise
            if t < start + rise + hold:
                return peak
            return base + (peak - base) * math.exp(-(t - start - rise - hold) / decay)

        return rate, peak

    return build


BUILT_IN: dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape("steady", "12 req/s all day", steady_rate()),
        Shape("diurnal", "3 req/s at night to 20 req/s at 14:00", diurnal_rate()),
        Shape("bursty", "7 req/s with 3-12 min bursts to 21 req/s, every ~45 min", bursty_rate()),
        Shape(
            "flash-crowd",
            "6 req/s, then a 2 min ramp to 24 req/s at 40% of the run, held 30 min",
            flash_crowd_rate(),
        ),
    )
}


def generate(shape: Shape, duration: float, seed: int) -> Trace:
    """The requests of a built-in trace over ``duration`` seconds; the same seed gives the same requests."""
    # Separate streams, so the burst schedule, the arrival times and the lengths do not shift each other.
    rate, peak = shape.build(duration, random.Random(f"{seed}:{shape.name}:shape"))
    arrivals = poisson_arrivals(rate, peak, duration, random.Random(f"{seed}:{shape.name}:arrivals"))
    lengths = random.Random(f"{seed}:{shape.name}:lengths")
    prompts, outputs = [], []
    for _ in arrivals:
        prompts.append(_lognormal_tokens(lengths, PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_RANGE))
        outputs.append(_lognormal_tokens(lengths, OUTPUT_MEDIAN, OUTPUT_SIGMA, OUTPUT_RANGE))
    return Trace(shape.name, duration, arrivals, prompts, outputs)


def poisson_arrivals(rate: RateFunction, peak: float, duration: float, rng: random.Random) -> list[float]:
    """Arrival times of a Poisson process with intensity ``rate(t) <= peak`` on [0, duration), by thinning."""
    arrivals: list[float] = []
    if peak <= 0:
        return arrivals
    t = 0.0
    expovariate, uniform = rng.expovariate, rng.random
    while True:
        t += expovariate(peak)
        if t >= duration:
            return arrivals
        if uniform() * peak < rate(t):
            arrivals.append(t)


def _lognormal_tokens(rng: random.Random, median: float, sigma: float, bounds: tuple[int, int]) -> int:
    value = int(round(rng.lognormvariate(math.log(median), sigma)))
    return min(max(value, bounds[0]), bounds[1])


def load_csv(path: str | Path, duration: float | None = None) -> Trace:
    """Requests from a CSV of ``arrival time (s), prompt tokens, output tokens``; a header row is optional.

    Rows are sorted by arrival; the span is ``duration`` or the last arrival. Raises ValueError naming the
    row that cannot be read.
    """
    path = Path(path)
    rows: list[tuple[float, int, int]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        for number, row in enumerate(csv.reader(handle), start=1):
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            try:
                arrival, prompt, output = float(row[0]), int(float(row[1])), int(float(row[2]))
            except (ValueError, IndexError):
                if number == 1:
                    continue  # a header row
                raise ValueError(
                    f"{path}:{number}: expected arrival seconds, prompt tokens, output tokens; got {row}"
                ) from None
            if arrival < 0 or prompt < 0 or output < 1:
                raise ValueError(
                    f"{path}:{number}: arrival must be >= 0, prompt >= 0 and output >= 1; got {row}"
                )
            rows.append((arrival, prompt, output))
    if not rows:
        raise ValueError(
            f"{path}: no requests (expected rows of arrival seconds, prompt tokens, output tokens)"
        )
    rows.sort(key=lambda r: r[0])
    span = duration if duration is not None else rows[-1][0]
    rows = [r for r in rows if r[0] < span] if duration is not None else rows
    return Trace(path.stem, max(span, 1e-9), [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def trace_by_name(name: str, duration: float, seed: int) -> Trace:
    """A built-in trace by name, or a CSV file when ``name`` ends in ``.csv``."""
    if name.lower().endswith(".csv"):
        return load_csv(name, duration)
    shape = BUILT_IN.get(name)
    if shape is None:
        raise ValueError(f"unknown trace {name!r}; use one of {', '.join(BUILT_IN)} or a .csv file")
    return generate(shape, duration, seed)
