"""Building blocks for the control-loop tests: rules, fleets and Prometheus answers as plain values."""

from __future__ import annotations

from ascend_fleet.api.availability import Availability
from ascend_fleet.api.v1alpha1 import Autoscaling, Rule
from ascend_fleet.control.evaluate import EvaluationSettings
from ascend_fleet.control.model import FleetState, PastAction, ReplicaInfo
from ascend_fleet.control.queries import Observations, rule_queries

NS, NAME = "team-a", "qwen"
POLICY = EvaluationSettings(step=1.0, interval=1.0, min_samples_fraction=0.8)
NOW = 1_700_000_000.0
LONG_AGO = NOW - 3600


def rule(
    metric: str = "npu_utilization",
    threshold: object = "85%",
    for_: str = "5s",
    action: str = "scale_up",
    **extra,
) -> Rule:
    return Rule(metric=metric, threshold=threshold, for_=for_, action=action, **extra)


def fleet(
    *rules: Rule,
    replicas: int = 2,
    ready: tuple[int, ...] | None = None,
    draining: tuple[int, ...] = (),
    actions: tuple[PastAction, ...] = (),
    max_unavailable: int = 1,
    since: float = LONG_AGO,
    name: str = NAME,
    domains: tuple[str | None, ...] | None = None,
    min_domains: int = 2,
    **autoscaling,
) -> FleetState:
    """A fleet of ``replicas``; with ``domains`` (each replica's node), under ``spec.availability``."""
    ready = tuple(range(replicas)) if ready is None else ready
    states = {
        i: ReplicaInfo(
            i,
            ready=i in ready,
            draining=i in draining,
            serving_since=since,
            leader=f"{name}-{i}",
            domain=None if domains is None else domains[i],
        )
        for i in range(replicas)
    }
    availability = None if domains is None else Availability(spread="node", min_domains=min_domains)
    return FleetState(
        NS,
        name,
        replicas,
        tuple(rules),
        Autoscaling(**autoscaling),
        max_unavailable,
        states,
        actions,
        availability,
    )


def answer(
    observations: Observations,
    r: Rule,
    value: float,
    samples: float = 5,
    replica: int | None = None,
    namespace: str = NS,
    name: str = NAME,
    policy: EvaluationSettings = POLICY,
) -> Observations:
    """Record what Prometheus would answer for one rule and one object (or replica)."""
    extreme, count = rule_queries(r, policy.catalog, policy.step)
    observations.series.setdefault(extreme, {})[(namespace, name, replica)] = value
    observations.series.setdefault(count, {})[(namespace, name, replica)] = samples
    return observations


def empty_answers(*rules: Rule, policy: EvaluationSettings = POLICY) -> Observations:
    """Prometheus answered every query of ``rules``, with no series at all."""
    observations = Observations()
    for r in rules:
        for query in rule_queries(r, policy.catalog, policy.step):
            observations.series.setdefault(query, {})
    return observations
