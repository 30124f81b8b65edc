"""The PromQL the control loop issues, and reading the answers back (pure).

A rule is a question about a *window*: did ``<expression> <comparison> <threshold>`` hold at every
sample of the last ``for`` seconds? Prometheus answers it for every object at once with a subquery:

    min_over_time((avg by (namespace, inference) (<expression>))[315s:15s])    # fleet scope, > or >=
    max_over_time((avg by (namespace, inference, replica) (<expression>))[315s:15s])  # replica scope, < or <=

The minimum over the window is above the threshold exactly when every sample is. A second query per
window counts the samples (``count_over_time`` of the same subquery), so a window with gaps, or one
that began before the data did, is told apart from a breach.

Prometheus bridges its own downtime: after a restart, every subquery step inside the outage still
sees the last sample from before it (the 5-minute lookback), so an outage would pass for a full
window. Each step is therefore kept only while Prometheus was scraping at that time, i.e. while some
``up`` sample is at most ``FRESH_STEPS`` steps old::

    ... (avg by (namespace, inference) (<expression>) and on () (time() - max(timestamp(up)) < 45)) ...

Gaps of a single target are seen without this (Prometheus marks the series stale). The threshold is compared here, not in
PromQL, so rules that differ only in threshold share their queries; the number of queries per cycle
is bounded by the distinct (expression, window, scope) triples of all rules, never by objects or pods.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..api.catalog import Catalog, role_expression
from ..api.v1alpha1 import Rule, Scope

Stat = Literal["min", "max", "count", "avg"]  # avg: for reports (ascend-fleet tune), not for rules
SeriesKey = tuple[str, str, int | None]  # namespace, inference, replica (None for fleet scope)

# A step counts while Prometheus scraped something within this many steps (step >= scrape interval).
FRESH_STEPS = 3
_FUNCTIONS: dict[str, str] = {
    "min": "min_over_time",
    "max": "max_over_time",
    "count": "count_over_time",
    "avg": "avg_over_time",
}
_GROUPING: dict[str, str] = {"fleet": "namespace, inference", "replica": "namespace, inference, replica"}


@dataclass(frozen=True, order=True)
class QueryWindow:
    """What one family of queries is about: an expression over a window, at fleet or replica level."""

    expression: str
    seconds: float
    scope: Scope


@dataclass(frozen=True, order=True)
class Query:
    """One PromQL instant query of a cycle."""

    window: QueryWindow
    stat: Stat

    def promql(self, step: float) -> str:
        """The query text: the window's subquery at ``step`` resolution, reduced by ``stat``."""
        inner = (
            f"avg by ({_GROUPING[self.window.scope]}) ({self.window.expression}) "
            f"and on () (time() - max(timestamp(up)) < {FRESH_STEPS * step:g})"
        )
        # One step more than the window: subquery points are aligned to multiples of the step, and only a
        # range of for + step is sure to include a point at or before now - for. Without it a condition
        # could "hold for 5m" after up to one step less.
        span = duration(self.window.seconds + step)
        return f"{_FUNCTIONS[self.stat]}(({inner})[{span}:{duration(step)}])"


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds as ``90s``, anything finer in milliseconds."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{max(1, round(seconds * 1000))}ms"


def extreme_stat(rule: Rule) -> Stat:
    """``min`` for ``>``/``>=`` (every sample above means the minimum is), ``max`` for ``<``/``<=``."""
    return "min" if rule.comparison in (">", ">=") else "max"


def rule_expression(rule: Rule, catalog: Catalog) -> str | None:
    """The PromQL a rule is about: its raw query, or its metric's catalog entry (None if unknown); a rule with a
    role reads that role's series only."""
    expression = rule.query.strip() if rule.query is not None else catalog.expression(rule.metric or "")
    if expression is None or rule.role is None:
        return expression
    return role_expression(expression, rule.role)


def rule_window(rule: Rule, catalog: Catalog, step: float) -> QueryWindow | None:
    """The window a rule reads; None when its metric is not in the catalog.

    A window shorter than one step still takes one sample, so ``for: 0s`` means "right now".
    """
    expression = rule_expression(rule, catalog)
    if expression is None:
        return None
    return QueryWindow(expression, max(float(rule.for_), step), rule.scope or "fleet")


def rule_queries(rule: Rule, catalog: Catalog, step: float) -> tuple[Query, Query] | None:
    """The two queries a rule needs: its extreme over the window, and the window's sample count."""
    window = rule_window(rule, catalog, step)
    if window is None:
        return None
    return Query(window, extreme_stat(rule)), Query(window, "count")


def plan_queries(rules: Iterable[Rule], catalog: Catalog, step: float) -> list[Query]:
    """The distinct queries for all rules of all objects, in a stable order."""
    wanted: set[Query] = set()
    for rule in rules:
        pair = rule_queries(rule, catalog, step)
        if pair is not None:
            wanted.update(pair)
    return sorted(wanted)


def expected_samples(window_seconds: float, step: float) -> int:
    """Samples a full window holds: one per step over ``for + step`` (see :meth:`Query.promql`)."""
    return math.floor(window_seconds / step + 1e-9) + 1


def required_samples(window_seconds: float, step: float, min_fraction: float) -> int:
    """Samples a window needs before its rule may hold (``control.minSamplesFraction`` of a full one)."""
    return max(1, math.ceil(min_fraction * expected_samples(window_seconds, step) - 1e-9))


def parse_vector(result: Iterable[Mapping], scope: Scope) -> dict[SeriesKey, float]:
    """Series of an instant-vector answer keyed by object (and replica); NaN and unlabelled series are dropped.

    Series lacking ``namespace``/``inference`` (or a numeric ``replica`` for replica scope) cannot be
    mapped to an object, so they are ignored rather than guessed at.
    """
    series: dict[SeriesKey, float] = {}
    for item in result:
        labels = item.get("metric") or {}
        namespace, inference = labels.get("namespace"), labels.get("inference")
        if not namespace or not inference:
            continue
        replica: int | None = None
        if scope == "replica":
            try:
                replica = int(labels.get("replica", ""))
            except ValueError:
                continue
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isfinite(value):
            series[(namespace, inference, replica)] = value
    return series


@dataclass(frozen=True)
class Failure:
    """Why a query has no answer: ``PrometheusUnavailable`` (unreachable, timed out) or ``QueryFailed``."""

    reason: str
    message: str


@dataclass
class Observations:
    """The answers of one cycle: series per query, or the failure of the query."""

    series: dict[Query, dict[SeriesKey, float]] = field(default_factory=dict)
    failures: dict[Query, Failure] = field(default_factory=dict)
    # What a series stands for, where a number says too little (the faults behind npu_unhealthy).
    details: dict[tuple[QueryWindow, SeriesKey], str] = field(default_factory=dict)

    def record(self, query: Query, result: Iterable[Mapping]) -> None:
        """Store a raw Prometheus vector answer for ``query``."""
        self.series[query] = parse_vector(result, query.window.scope)

    def fail(self, query: Query, reason: str, message: str) -> None:
        self.failures[query] = Failure(reason, message)

    def failure(self, *queries: Query) -> Failure | None:
        """The first failure among ``queries`` (a query never answered counts as unavailable)."""
        for query in queries:
            if query in self.failures:
                return self.failures[query]
            if query not in self.series:
                return Failure("PrometheusUnavailable", "the query was not run")
        return None

    def value(self, query: Query, key: SeriesKey) -> float | None:
        return self.series.get(query, {}).get(key)

    def note(self, window: QueryWindow, key: SeriesKey, text: str) -> None:
        self.details[(window, key)] = text

    def detail(self, window: QueryWindow, key: SeriesKey) -> str | None:
        return self.details.get((window, key))
