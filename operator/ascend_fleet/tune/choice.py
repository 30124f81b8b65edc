"""Which rung a tuning run chooses (pure).

Two goals:

- a first-token latency target (``--target-ttft 100ms``, the default): the rung with the most tokens/s
  whose TTFT p99 is within the target, allowing ``tolerance`` (20 % by default) above it. The seeds
  accepted batch 32 at 105 ms against their 100 ms target, and that figure is the engine's own; a p99
  measured by a client through streamed HTTP adds the serving stack's delay and the machine's
  scheduling on top (measured here: 2 to 12 ms at batch 32). On a ladder of doublings the next rung
  roughly doubles the first-token latency (64: 210 ms), so a 20 % band never admits it;
- ``--max-throughput``: the knee of the curve, i.e. the most tokens/s, except that a larger batch must
  beat the best smaller one by ``min_gain`` (5 %): the seeds' 128 gives 2 % more than 64 for twice the
  latency, which is no gain worth having.

Rows with more than ``max_failure_share`` failed requests never qualify.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .table import Row

DEFAULT_TARGET_TTFT_S = 0.100
DEFAULT_TOLERANCE = 0.20
DEFAULT_MIN_GAIN = 0.05
MAX_FAILURE_SHARE = 0.01


@dataclass(frozen=True)
class Goal:
    """What the choice optimises."""

    target_ttft_s: float | None = DEFAULT_TARGET_TTFT_S  # None: maximum throughput
    tolerance: float = DEFAULT_TOLERANCE
    min_gain: float = DEFAULT_MIN_GAIN
    max_failure_share: float = MAX_FAILURE_SHARE

    def describe(self) -> str:
        if self.target_ttft_s is None:
            return "max throughput"
        return f"ttft_p99 <= {self.target_ttft_s * 1000:g}ms (+{self.tolerance:.0%})"


@dataclass(frozen=True)
class Choice:
    """The chosen row (None when no row qualifies) and why, in a sentence."""

    row: Row | None
    reason: str
    met: bool


def choose(rows: Sequence[Row], goal: Goal) -> Choice:
    """The rung that best meets ``goal``."""
    healthy = [r for r in rows if r.completed and r.failure_share <= goal.max_failure_share]
    if not healthy:
        return Choice(None, "no rung completed its requests without failures; nothing to choose", False)
    if goal.target_ttft_s is None:
        return _knee(healthy, goal.min_gain)
    limit_ms = goal.target_ttft_s * 1000 * (1 + goal.tolerance)
    within = [r for r in healthy if r.ttft_p99_ms <= limit_ms]
    if not within:
        fastest = min(healthy, key=lambda r: (r.ttft_p99_ms, r.batch_size))
        return Choice(
            fastest,
            f"no rung meets TTFT p99 <= {limit_ms:.0f} ms; batch {fastest.label} has the lowest "
            f"({fastest.ttft_p99_ms:.0f} ms): lower the load, add replicas or relax --target-ttft",
            False,
        )
    best = max(within, key=lambda r: (r.tokens_per_second, -r.batch_size))
    above = [r for r in healthy if r.batch_size > best.batch_size and r.ttft_p99_ms > limit_ms]
    nxt = min(above, key=lambda r: r.batch_size) if above else None
    reason = (
        f"batch {best.label}: {best.tokens_per_second:.0f} tokens/s at TTFT p99 {best.ttft_p99_ms:.0f} ms, "
        f"the most throughput within {limit_ms:.0f} ms"
    )
    if nxt is not None:
        reason += f" (batch {nxt.label} needs {nxt.ttft_p99_ms:.0f} ms)"
    return Choice(best, reason, True)


def _knee(rows: Sequence[Row], min_gain: float) -> Choice:
    ordered = sorted(rows, key=lambda r: (r.batch_size, r.adaptive))
    best = ordered[0]
    for row in ordered[1:]:
        if row.tokens_per_second > best.tokens_per_second * (1 + min_gain):
            best = row
    top = max(rows, key=lambda r: r.tokens_per_second)
    reason = f"batch {best.label}: {best.tokens_per_second:.0f} tokens/s"
    if top is not best:
        gain = top.tokens_per_second / best.tokens_per_second - 1
        reason += (
            f"; batch {top.label} gives only {gain:.0%} more (under {min_gain:.0%}) "
            f"at TTFT p99 {top.ttft_p99_ms:.0f} ms instead of {best.ttft_p99_ms:.0f} ms"
        )
    return Choice(best, reason, True)
