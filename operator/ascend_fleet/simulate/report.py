"""Numbers from runs: the per-policy summary, the side-by-side table and a verdict in plain words."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .model import Result
from .variants import precision_shares

SLOW_FIRST_TOKEN_SECONDS = 1.0
BUCKET_SECONDS = 300.0


@dataclass(frozen=True)
class Summary:
    """What a policy achieved on a trace."""

    policy: str
    trace: str
    requests: int
    completed: int
    failed: int
    first_token_p50: float
    first_token_p99: float
    end_to_end_p50: float
    end_to_end_p99: float
    slow_share: float
    """Share of all requests whose first token took more than 1 s, failed requests included."""
    requests_per_second: float
    tokens_per_second: float
    npu_hours: float
    scale_ups: int
    scale_downs: int
    rule_restarts: int
    oom_crashes: int
    precision_share: dict[str, float] = field(default_factory=dict)
    """With spec.variants: each precision's share of the output tokens of completed requests."""

    @property
    def scale_actions(self) -> int:
        return self.scale_ups + self.scale_downs

    @property
    def restarts(self) -> int:
        return self.rule_restarts + self.oom_crashes


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (NaN when empty)."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def summarize(result: Result) -> Summary:
    """The numbers of one run. Latency percentiles are over completed requests; the slow share counts
    every request whose first token came after more than a second or never came."""
    first = sorted(x for x in result.first_token if x == x)  # x == x drops NaN
    done = [i for i, x in enumerate(result.end_to_end) if x == x]
    e2e = sorted(result.end_to_end[i] for i in done)
    total = len(result.first_token)
    completed = len(done)
    fast = sum(1 for i in done if result.first_token[i] <= SLOW_FIRST_TOKEN_SECONDS)
    tokens = sum(result.output_tokens[i] for i in done)
    duration = result.duration or 1.0
    return Summary(
        policy=result.policy,
        trace=result.trace,
        requests=total,
        completed=completed,
        failed=total - completed,
        first_token_p50=percentile(first, 50),
        first_token_p99=percentile(first, 99),
        end_to_end_p50=percentile(e2e, 50),
        end_to_end_p99=percentile(e2e, 99),
        slow_share=(total - fast) / total if total else 0.0,
        requests_per_second=completed / duration,
        tokens_per_second=tokens / duration,
        npu_hours=result.npu_hours,
        scale_ups=result.scale_ups,
        scale_downs=result.scale_downs,
        rule_restarts=result.rule_restarts,
        oom_crashes=result.oom_crashes,
        precision_share=precision_shares(
            result.variants, result.served_by, result.output_tokens, [x == x for x in result.end_to_end]
        ),
    )


# ----- table -----

_COLUMNS = (
    ("policy", "{}"),
    ("TTFT p50", "{}"),
    ("TTFT p99", "{}"),
    ("E2E p50", "{}"),
    ("E2E p99", "{}"),
    (">1s", "{}"),
    ("req/s", "{}"),
    ("tok/s", "{}"),
    ("NPU-h", "{}"),
    ("scale +/-", "{}"),
    ("restarts rule/OOM", "{}"),
    ("failed", "{}"),
)


def _seconds(value: float) -> str:
    if value != value:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _row(s: Summary) -> tuple[str, ...]:
    return (
        s.policy,
        _seconds(s.first_token_p50),
        _seconds(s.first_token_p99),
        _seconds(s.end_to_end_p50),
        _seconds(s.end_to_end_p99),
        f"{s.slow_share * 100:.1f}%",
        f"{s.requests_per_second:.2f}",
        f"{s.tokens_per_second:.0f}",
        f"{s.npu_hours:.0f}",
        f"{s.scale_ups}/{s.scale_downs}",
        f"{s.rule_restarts}/{s.oom_crashes}",
        f"{s.failed} ({s.failed / s.requests * 100 if s.requests else 0:.2f}%)",
    )


def _precision(s: Summary) -> str:
    return " ".join(f"{p} {share * 100:.0f}%" for p, share in s.precision_share.items()) or "-"


def table(summaries: Sequence[Summary]) -> str:
    """The side-by-side comparison as aligned text (also valid Markdown); with precision variants, a column
    of each precision's share of the tokens served, so accuracy and the tail sit side by side."""
    header = tuple(name for name, _ in _COLUMNS)
    rows = [header, *(_row(s) for s in summaries)]
    if any(s.precision_share for s in summaries):
        rows = [(*header, "tokens by precision"), *((*_row(s), _precision(s)) for s in summaries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(cells: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
            + " |"
        )

    rule = (
        "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    )
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])


# ----- verdict -----


WIN, LOSE, TRADE_OFF = "WIN", "LOSE", "TRADE-OFF"
# Differences smaller than these are a draw: 2 % of NPU-hours, 0.1 point of slow share, 10 % of p99.
_COST_DRAW, _SLOW_DRAW, _P99_DRAW = 0.02, 0.001, 0.10


def outcome(rules: Summary, other: Summary) -> str:
    """WIN when the rules are no worse on cost and latency and better on one; LOSE the other way round."""
    cost = _relative(rules.npu_hours, other.npu_hours)
    latency = _latency_sign(rules, other)
    cost_sign = 0 if abs(cost) <= _COST_DRAW else (1 if cost > 0 else -1)
    if cost_sign <= 0 and latency <= 0 and (cost_sign, latency) != (0, 0):
        return WIN
    if cost_sign >= 0 and latency >= 0 and (cost_sign, latency) != (0, 0):
        return LOSE
    return TRADE_OFF if (cost_sign, latency) != (0, 0) else "DRAW"


def _latency_sign(rules: Summary, other: Summary) -> int:
    """-1 when the rules serve faster (fewer requests over 1 s; p99 decides a tie), +1 when slower."""
    slow = rules.slow_share - other.slow_share
    if abs(slow) > _SLOW_DRAW:
        return 1 if slow > 0 else -1
    p99 = _relative(rules.first_token_p99, other.first_token_p99)
    return 0 if abs(p99) <= _P99_DRAW else (1 if p99 > 0 else -1)


def _relative(value: float, base: float) -> float:
    return (value - base) / base if base else 0.0


def compare(rules: Summary, other: Summary) -> str:
    """One sentence: how the rules fared against another policy on latency and on cost."""
    return (
        f"{outcome(rules, other)} vs {other.policy}: "
        f"{_percent_change(_relative(rules.npu_hours, other.npu_hours))} NPU-hours "
        f"({rules.npu_hours:.0f} vs {other.npu_hours:.0f}), requests over 1 s {rules.slow_share * 100:.1f}% "
        f"vs {other.slow_share * 100:.1f}%, TTFT p99 {_seconds(rules.first_token_p99)} vs "
        f"{_seconds(other.first_token_p99)}, failed {rules.failed} vs {other.failed}"
    )


def _percent_change(change: float) -> str:
    if abs(change) < 0.005:
        return "the same"
    return f"{abs(change) * 100:.0f}% {'fewer' if change < 0 else 'more'}"


def verdict(summaries: Sequence[Summary], rules_policy: str = "rules") -> list[str]:
    """Sentences comparing the rules policy with every other policy of the same trace."""
    rules = next((s for s in summaries if s.policy == rules_policy), None)
    if rules is None:
        return []
    return [f"rules {compare(rules, s)}" for s in summaries if s is not rules]


# ----- time series for plots -----


def latency_series(
    result: Result, bucket: float = BUCKET_SECONDS
) -> tuple[list[float], list[float], list[float]]:
    """Per ``bucket`` of arrival time: bucket start (h), TTFT p99 (s) of completed requests and slow share."""
    buckets = max(1, math.ceil(result.duration / bucket))
    first: list[list[float]] = [[] for _ in range(buckets)]
    slow = [0] * buckets
    count = [0] * buckets
    for arrival, value in zip(result.arrivals, result.first_token, strict=True):
        b = min(int(arrival // bucket), buckets - 1)
        count[b] += 1
        if value == value:
            first[b].append(value)
            slow[b] += value > SLOW_FIRST_TOKEN_SECONDS
        else:
            slow[b] += 1
    hours = [b * bucket / 3600.0 for b in range(buckets)]
    p99 = [percentile(sorted(v), 99) for v in first]
    share = [slow[b] / count[b] if count[b] else math.nan for b in range(buckets)]
    return hours, p99, share
