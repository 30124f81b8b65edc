"""The project's rules as a simulator policy, decided by the operator's own evaluation code.

Nothing of the rule semantics is re-implemented here: every control tick this adapter

1. builds the :class:`~ascend_fleet.control.model.FleetState` the operator would read from the API
   (replica count, rules, bounds, disruption budget, replicas ready or draining, recorded actions);
2. answers the very queries the operator would send to Prometheus
   (:func:`~ascend_fleet.control.evaluate.queries_for`), computing each subquery's extreme and sample
   count from the simulated scrapes, and hands them over as Prometheus vectors;
3. calls :func:`~ascend_fleet.control.evaluate.decide` and lets each decision's action apply it to the tick
   (a replica count, restarts, a traffic split), remembering them as ``status.actions`` would, for the cooldowns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..api.settings import ControlSettings
from ..api.v1alpha1 import AscendInferenceSpec, Rule
from ..control import evaluate
from ..control.actions import Effect, action_for
from ..control.model import ControlDecision, FleetState, PastAction, ReplicaInfo
from ..control.queries import Observations, Query
from .metrics import METRICS, MetricStore
from .model import DRAINING, SERVING, FleetView, TickDecision

NAMESPACE = "simulated"

# How each query of a window reduces its samples (``min_over_time``, ``max_over_time``, ``count_over_time``).
# The simulated exporter has one series per replica, so ``avg by (..., replica)`` is the sample itself.
_STATS: dict[str, Callable[[list[float]], float]] = {
    "min": min,
    "max": max,
    "count": len,
}


@dataclass
class RulesPolicy:
    """The spec's rules (optionally without the restarts of healthy replicas), steered like the operator steers."""

    spec: AscendInferenceSpec
    name: str = "rules"
    restarts: bool = True
    settings: ControlSettings = field(default_factory=ControlSettings)
    inference: str = "simulated"
    decisions: list[ControlDecision] = field(default_factory=list, init=False, repr=False)
    # What the fleet's status.actions would list, newest first (see _remember).
    actions: list[PastAction] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.evaluation = evaluate.EvaluationSettings.from_settings(self.settings)
        self.interval = float(self.evaluation.interval)
        self.rules: tuple[Rule, ...] = tuple(
            r
            for r in self.spec.rules_in_force()
            if self.restarts or not action_for(r.action).kind.restarts_healthy
        )
        # The queries the operator would send for this spec; observe() answers them from the scrapes.
        self.queries = evaluate.queries_for([self._fleet_state(0, {})], self.evaluation)
        names = {expression: metric for metric, expression in self.evaluation.catalog.entries.items()}
        self._metric_of = {q: names.get(q.window.expression) for q in self.queries}
        # Keep each recorded action as long as any cooldown or notify spacing could still read it.
        bounds = self.spec.autoscaling
        self._memory = (
            max(
                bounds.scale_up_cooldown,
                bounds.scale_down_cooldown,
                bounds.restart_cooldown,
                bounds.shift_cooldown,
                *(float(r.for_) for r in self.rules),
                0.0,
            )
            + self.interval
        )

    def decide(self, view: FleetView) -> TickDecision:
        states = {
            r.index: ReplicaInfo(
                index=r.index,
                ready=r.state in (SERVING, DRAINING),
                draining=r.state == DRAINING,
                serving_since=r.ready_at,
            )
            for r in view.replicas
        }
        fleet = self._fleet_state(view.desired, states, dict(view.traffic))
        observations = self.observe(view.metrics, view.now)
        decisions = evaluate.decide([fleet], observations, view.now, self.evaluation)
        self.decisions.extend(decisions)
        self._remember(decisions, view.now)
        if self.spec.autoscaling.dry_run:
            return TickDecision()
        effect = Effect()
        for d in decisions:
            effect = action_for(d.action).simulate(d, effect)
        return TickDecision(replicas=effect.replicas, restart=effect.restart, traffic=effect.traffic)

    # ----- what the operator would read -----

    def _fleet_state(
        self, replicas: int, states: dict[int, ReplicaInfo], traffic: dict[str, int] | None = None
    ) -> FleetState:
        return FleetState(
            namespace=NAMESPACE,
            name=self.inference,
            replicas=replicas,
            rules=self.rules,
            autoscaling=self.spec.autoscaling,
            max_unavailable=self.spec.disruption.max_unavailable,
            replica_states=states,
            actions=tuple(self.actions),
            traffic=traffic or {},
        )

    def _remember(self, decisions: list[ControlDecision], now: float) -> None:
        """Newest first, as status.actions; old entries go once no cooldown can need them."""
        new = [PastAction(now, d.rule, d.action, d.target, d.dry_run) for d in decisions]
        self.actions = [*new, *(a for a in self.actions if now - a.time <= self._memory)]

    def observe(self, store: MetricStore, now: float) -> Observations:
        """Answer the operator's queries from the simulated scrapes, as Prometheus would."""
        observations = Observations()
        for query in self.queries:
            metric = self._metric_of[query]
            if metric not in METRICS:
                observations.record(query, [])  # a metric the simulator does not export: no series
                continue
            observations.record(query, _vector(store, query, metric, now, self.inference))
        return observations


def _vector(store: MetricStore, query: Query, metric: str, now: float, inference: str) -> list[dict]:
    """The instant vector ``<stat>_over_time((avg by (...) (metric))[window:step])`` at ``now``."""
    window = query.window
    start = now - window.seconds
    reduce = _STATS[query.stat]
    labels = {"namespace": NAMESPACE, "inference": inference}
    if window.scope == "replica":
        answer: list[dict] = []
        for index in store.replicas_in(start, now):
            values = [v for _, v in store.replica_series(metric, index, start, now)]
            answer.append({"metric": {**labels, "replica": str(index)}, "value": [now, str(reduce(values))]})
        return answer
    values = [v for _, v in store.fleet_series(metric, start, now)]
    if not values:
        return []
    return [{"metric": labels, "value": [now, str(reduce(values))]}]
