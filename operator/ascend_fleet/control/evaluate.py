"""Rules + query answers + object state + clock -> decisions (pure).

Nothing here talks to Kubernetes or Prometheus, and nothing is remembered between calls: cooldowns
and restart spacing come from the object's recorded actions (``status.actions``), windows from
Prometheus. So an operator restarted in the middle of a window decides exactly as it would have,
and a simulator can drive :func:`decide` with plain values.

This module checks each rule's window and groups the rules that held by action; each action (its class in
:mod:`.actions`) then decides in turn, in the registry's order. The rules of the game:

- A rule *holds* when its comparison held at every sample of its window and the window has at
  least ``minSamplesFraction`` of its samples; a gap is never a breach.
- ``scale_up``/``scale_down`` change the replica count by one within ``min``/``maxReplicas``. A
  scale-up waits ``scaleUpCooldown`` after the previous scale-up; a scale-down waits
  ``scaleDownCooldown`` after any scale. When both hold, scaling up wins (availability first).
- ``restart_service`` recycles one replica (drain, delete, recreate). A replica is restarted at most
  once per ``restartCooldown``, and only while fewer than ``disruption.maxUnavailable`` replicas
  are out of service (not ready, or draining for any reason, rollouts included). When several
  replicas qualify, the worst goes first.
- With ``spec.availability``, neither ``restart_service`` nor ``scale_down`` takes a replica that is the
  last one serving in its domain (node or zone) when the domains still serving without it would be
  fewer than ``minDomains``: a dual-active fleet is never made single-active by its own rules. While
  a serving replica's domain is not known, such an action waits.
- ``shift_traffic`` moves ``step`` percent of the requests to the variant ``to``, at most once per
  ``shiftCooldown`` in either direction (so a rule and its way back cannot flap faster than the metric can show
  the effect); the first holding shift rule in spec order acts, and one whose variant has everything already
  does nothing.
- ``notify`` only records, at most once per window length for the same rule and target.
- On a two-role fleet each rule is checked and acted on in its role's view (:meth:`FleetState.for_role`): the
  role's replicas, bounds and targets, so cooldowns run per role; the disruption budget is shared by the roles.
- ``dryRun`` records every decision with ``dryRun: true`` and changes nothing; cooldowns then pace
  the dry-run records as they would pace real actions (and real actions ignore dry-run records).
- A replica that began serving less than a window (plus a little grace) ago has no full window yet:
  its missing samples are expected, so they neither act nor mark metrics unavailable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..api.catalog import Catalog
from ..api.settings import ControlSettings
from ..api.units import format_duration
from ..api.v1alpha1 import Rule
from .actions import action_for, deciding
from .model import ControlDecision, Cycle, FleetState, Held
from .queries import Observations, Query, plan_queries, required_samples, rule_queries

# Reasons of the MetricsAvailable condition, most important first (the condition shows the first found).
REASON_OK = "Evaluated"
REASON_NO_RULES = "NoRules"
REASON_UNAUTHORIZED = "PrometheusUnauthorized"
REASON_UNAVAILABLE = "PrometheusUnavailable"
REASON_QUERY_FAILED = "QueryFailed"
REASON_UNKNOWN_METRIC = "UnknownMetric"
REASON_NO_DATA = "NoData"
REASON_INSUFFICIENT = "InsufficientSamples"
_PRIORITY = (
    REASON_UNAUTHORIZED,
    REASON_UNAVAILABLE,
    REASON_QUERY_FAILED,
    REASON_UNKNOWN_METRIC,
    REASON_NO_DATA,
    REASON_INSUFFICIENT,
)
_MAX_MESSAGES = 5


# ----- inputs -----


@dataclass(frozen=True)
class EvaluationSettings:
    """Operator-wide evaluation settings."""

    catalog: Catalog = field(default_factory=Catalog.build)
    step: float = 15.0  # subquery resolution
    interval: float = 15.0  # time between cycles
    min_samples_fraction: float = 0.8

    @classmethod
    def from_settings(cls, control: ControlSettings) -> EvaluationSettings:
        return cls(
            catalog=Catalog.build(control.catalog_preset, control.catalog),
            step=float(control.step),
            interval=float(control.interval),
            min_samples_fraction=control.min_samples_fraction,
        )

    @property
    def warmup_grace(self) -> float:
        """How long after a window a new replica's samples may still be missing (first scrapes, alignment)."""
        return 2 * self.step + self.interval


# ----- outputs -----


@dataclass(frozen=True)
class MetricsStatus:
    """The MetricsAvailable condition of one object."""

    available: bool
    reason: str
    message: str


@dataclass
class Evaluation:
    """What one object gets from one cycle."""

    fleet: FleetState
    decisions: list[ControlDecision] = field(default_factory=list)
    metrics: MetricsStatus = field(default_factory=lambda: MetricsStatus(True, REASON_NO_RULES, "no rules"))
    notes: list[str] = field(default_factory=list)  # rules that held but did not act, and why


# ----- evaluation -----


def decide(
    fleets: Iterable[FleetState],
    observations: Observations,
    now: float,
    policy: EvaluationSettings | None = None,
) -> list[ControlDecision]:
    """Every decision for every object in one cycle."""
    policy = policy or EvaluationSettings()
    return [d for fleet in fleets for d in evaluate(fleet, observations, now, policy).decisions]


def evaluate(
    fleet: FleetState, observations: Observations, now: float, policy: EvaluationSettings | None = None
) -> Evaluation:
    """Check one object's rules against the answers and turn those that held into decisions."""
    policy = policy or EvaluationSettings()
    result = Evaluation(fleet)
    if not fleet.rules:
        return result
    unknown = sorted(
        {
            r.metric
            for r in fleet.rules
            # The model allows exactly one of metric and query, so a rule without a query names a metric.
            if r.metric is not None and r.query is None and policy.catalog.expression(r.metric) is None
        }
    )
    if unknown:
        # The reconciler holds an object with an unknown metric at InvalidSpec and touches none of its
        # children, so no rule of it may act (a drain would never finish).
        message = "; ".join(policy.catalog.unknown(metric) for metric in unknown)
        result.metrics = MetricsStatus(False, REASON_UNKNOWN_METRIC, message)
        return result

    problems: list[tuple[str, str]] = []
    held: list[Held] = []
    for rule in fleet.rules:
        view = fleet.for_role(rule.role) if rule.role is not None and fleet.roles else fleet
        held += _check_rule(view, rule, observations, now, policy, problems)
    result.metrics = _metrics_status(fleet, problems)
    # The disruption budget is the object's: a role's restart spends what the other role's may not.
    budget = fleet.max_unavailable - fleet.unavailable()
    for view in fleet.views():
        by_action: dict[str, list[Held]] = {}
        for h in held:
            if h.rule.role == view.role or not fleet.roles:
                by_action.setdefault(h.rule.action, []).append(h)
        cycle = Cycle(view, now, policy.step, by_action, budget)
        for action in deciding():
            action.decide(cycle, cycle.holding(action.name))
        result.decisions += cycle.decisions
        result.notes += cycle.notes
        budget = cycle.budget
    return result


def _check_rule(
    fleet: FleetState,
    rule: Rule,
    observations: Observations,
    now: float,
    policy: EvaluationSettings,
    problems: list[tuple[str, str]],
) -> list[Held]:
    queries = rule_queries(rule, policy.catalog, policy.step)
    assert queries is not None  # unknown metrics were handled by the caller
    extreme, count = queries
    failure = observations.failure(extreme, count)
    subject = rule.metric or "query"
    if failure is not None:
        problems.append((failure.reason, failure.message))
        return []
    window = extreme.window.seconds
    needed = required_samples(window, policy.step, policy.min_samples_fraction)
    full_after = window + policy.warmup_grace
    held = []
    for target, replica, since in _targets(fleet, rule):
        key = (fleet.namespace, fleet.name, replica)
        value, samples = observations.value(extreme, key), observations.value(count, key)
        warming = since is not None and now - since < full_after
        where = "" if replica is None else f" of replica {replica}"
        if fleet.role is not None:
            where += f" of the {fleet.role} role"
        if value is not None and samples is None:
            samples = 0.0  # Prometheus was not scraping during the window: no step counted
        if value is None or samples is None:
            if not warming:
                problems.append(
                    (
                        REASON_NO_DATA,
                        f"{subject}: no series{where} in Prometheus (are the engine "
                        "pods scraped with namespace, inference and replica labels?)",
                    )
                )
            continue
        if samples < needed:
            if not warming:
                problems.append(
                    (
                        REASON_INSUFFICIENT,
                        f"{subject}: {samples:g} samples{where} in the last "
                        f"{format_duration(window)}, {needed} needed",
                    )
                )
            continue
        if _compare(value, rule.comparison, rule.threshold):
            held.append(Held(rule, target, replica, value, observations.detail(extreme.window, key)))
    return action_for(rule.action).holding(rule, held, len(_targets(fleet, rule)))


def _targets(fleet: FleetState, rule: Rule) -> list[tuple[str, int | None, float | None]]:
    """(target, replica, serving since) for each thing a rule is checked on; nothing without ready replicas."""
    ready = [
        fleet.replica_states[i]
        for i in sorted(fleet.replica_states)
        if i < fleet.replicas and fleet.replica_states[i].ready and not fleet.replica_states[i].draining
    ]
    if not ready:
        return []
    if rule.scope == "replica":
        return [(fleet.replica_target(info.index), info.index, info.serving_since) for info in ready]
    # The fleet series exists as long as any replica has data, so the oldest replica decides its age.
    times = [info.serving_since for info in ready]
    oldest = None if any(t is None for t in times) else min(t for t in times if t is not None)
    return [(fleet.target, None, oldest)]


def _compare(value: float, comparison: str, threshold: float) -> bool:
    return {
        ">": value > threshold,
        ">=": value >= threshold,
        "<": value < threshold,
        "<=": value <= threshold,
    }[comparison]


def _metrics_status(fleet: FleetState, problems: list[tuple[str, str]]) -> MetricsStatus:
    if not problems:
        count = len(fleet.rules)
        builtin = fleet.rules[len(fleet.rules) - fleet.builtin :]
        among = f" (built in: {', '.join(r.describe() for r in builtin)})" if builtin else ""
        return MetricsStatus(True, REASON_OK, f"{count} rule{'s' if count != 1 else ''} evaluated{among}")
    reason = min((r for r, _ in problems), key=_PRIORITY.index)
    messages = list(dict.fromkeys(m for r, m in sorted(problems, key=lambda p: _PRIORITY.index(p[0]))))
    more = len(messages) - _MAX_MESSAGES
    text = "; ".join(messages[:_MAX_MESSAGES]) + (f"; and {more} more" if more > 0 else "")
    return MetricsStatus(False, reason, text + "; rules without data do not act")


def queries_for(fleets: Sequence[FleetState], policy: EvaluationSettings) -> list[Query]:
    """The distinct queries a cycle needs to evaluate ``fleets``: one per window and statistic, not per object."""
    return plan_queries((rule for fleet in fleets for rule in fleet.rules), policy.catalog, policy.step)
