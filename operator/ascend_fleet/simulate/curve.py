"""The engine's batch-size curve: decode throughput and first-token latency against running sequences.

The default is the seeds' measured ladder (vllm-ascend on one 8-NPU replica): batch 4/8/16/32/64/128
gives 180/420/890/1550/2100/2150 tokens/s of decode and 45/52/68/105/210/450 ms to the first token.
Between rungs both are interpolated linearly in the batch size. Below the first rung the per-sequence
decode rate stays that of the first rung (a half-empty small batch is not faster per sequence) and the
first-token latency stays at its floor; above the last rung both stay flat.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

SEED_BATCHES = (4, 8, 16, 32, 64, 128)
SEED_TOKENS_PER_SECOND = (180.0, 420.0, 890.0, 1550.0, 2100.0, 2150.0)
SEED_FIRST_TOKEN_SECONDS = (0.045, 0.052, 0.068, 0.105, 0.210, 0.450)


@dataclass(frozen=True)
class BatchCurve:
    """Decode throughput (tokens/s for the whole batch) and first-token latency (s) per batch size."""

    batches: tuple[int, ...] = SEED_BATCHES
    tokens_per_second: tuple[float, ...] = SEED_TOKENS_PER_SECOND
    first_token_seconds: tuple[float, ...] = SEED_FIRST_TOKEN_SECONDS

    def __post_init__(self) -> None:
        if not (len(self.batches) == len(self.tokens_per_second) == len(self.first_token_seconds) >= 1):
            raise ValueError(
                "a batch curve needs the same number (at least one) of batches, rates and latencies"
            )
        if any(b <= a for a, b in zip(self.batches, self.batches[1:], strict=False)) or self.batches[0] < 1:
            raise ValueError(f"batch sizes must be positive and increasing, got {list(self.batches)}")
        if any(v <= 0 for v in (*self.tokens_per_second, *self.first_token_seconds)):
            raise ValueError("throughputs and first-token latencies must be positive")

    @property
    def largest_batch(self) -> int:
        return self.batches[-1]

    def throughput(self, batch: float) -> float:
        """Decode tokens per second of the whole batch when ``batch`` sequences run."""
        if batch <= 0:
            return 0.0
        first = self.batches[0]
        if batch < first:
            return self.tokens_per_second[0] * batch / first
        return _interpolate(self.batches, self.tokens_per_second, batch)

    def first_token(self, batch: float) -> float:
        """Seconds from admission to the first token when the batch holds ``batch`` sequences."""
        return _interpolate(self.batches, self.first_token_seconds, max(batch, self.batches[0]))

    def per_sequence_rate(self, batch: float) -> float:
        """Decode tokens per second each of ``batch`` running sequences gets."""
        return self.throughput(batch) / batch if batch > 0 else 0.0

    def table(self, max_batch: int) -> tuple[list[float], list[float], list[float]]:
        """Per-sequence rate, first-token latency and throughput for batch 0..max_batch, for fast lookups."""
        sizes = range(max_batch + 1)
        return (
            [self.per_sequence_rate(b) for b in sizes],
            [self.first_token(b) for b in sizes],
            [self.throughput(b) for b in sizes],
        )


def _interpolate(xs: tuple[int, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear through (xs, ys), flat outside."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_right(xs, x) - 1
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def parse_curve(text: str) -> BatchCurve:
    """A curve from ``batch:tokens_per_s:first_token_ms`` items separated by commas, e.g. ``4:180:45,8:420:52``."""
    points = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3:
            raise ValueError(f"{item.strip()!r} is not batch:tokens_per_s:first_token_ms, e.g. 32:1550:105")
        try:
            points.append((int(parts[0]), float(parts[1]), float(parts[2]) / 1000.0))
        except ValueError:
            raise ValueError(
                f"{item.strip()!r} is not batch:tokens_per_s:first_token_ms, e.g. 32:1550:105"
            ) from None
    points.sort()
    return BatchCurve(tuple(p[0] for p in points), tuple(p[1] for p in points), tuple(p[2] for p in points))
