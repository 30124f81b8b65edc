"""``scale_up`` and ``scale_down``: one replica more or fewer, within the autoscaling bounds.

A scale-up waits ``scaleUpCooldown`` after the previous scale-up; a scale-down waits ``scaleDownCooldown``
after any scale. When both hold, scaling up wins (availability first).

On a two-role fleet a rule scales its role (``spec.disaggregation.<role>.parallelism.data``) within the role's
bounds, with the cooldowns counted per role. A scale that would leave ``spec.disaggregation.ratio`` is recorded
with the count unchanged and the reason (so it is announced once per cooldown, not every cycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ...api import names
from ...api.actions import action_kind
from .base import Effect, RuleAction, Write

if TYPE_CHECKING:
    from ...api.v1alpha1 import Rule
    from ..model import ControlDecision, Cycle, Held


class _Scale(RuleAction):
    """What both directions share: how they read and what they write."""

    def describe(self, decision: ControlDecision) -> str:
        """The replica count before and after (of the role, on a two-role fleet), or why it stays."""
        role = f"{decision.role} " if decision.role else ""
        if decision.held_by is not None:
            return f"{role}replicas stay {decision.replicas_from}: {decision.held_by}"
        return f"{role}replicas {decision.replicas_from} -> {decision.replicas_to}"

    def writes(self, decision: ControlDecision, now: float) -> tuple[Write, ...]:
        """The new count in ``spec.parallelism.data``, as HPA does through the scale subresource; a role's in
        ``spec.disaggregation.<role>.parallelism.data``; nothing for a scale the ratio held."""
        if decision.held_by is not None or decision.replicas_to == decision.replicas_from:
            return ()
        data = {"parallelism": {"data": decision.replicas_to}}
        patch = {"spec": {"disaggregation": {decision.role: data}} if decision.role else data}
        return (Write(names.KIND, decision.name, patch, guarded=True),)

    def decide_count(self, cycle: Cycle, first: Held, to: int, verb: str) -> None:
        """Decide the scale to ``to``, or record why the ratio between the roles holds it."""
        fleet = cycle.fleet
        problem = fleet.ratio_problem(to)
        if problem is None:
            cycle.decide(first, self.name, replicas_from=fleet.replicas, replicas_to=to)
            return
        held_by = f"{verb} {fleet.role} would make {problem} (spec.disaggregation.ratio)"
        cycle.note(f"{first.rule.display_name()}: no {verb}, {held_by}")
        cycle.decide(
            first, self.name, replicas_from=fleet.replicas, replicas_to=fleet.replicas, held_by=held_by
        )

    def simulate(self, decision: ControlDecision, effect: Effect) -> Effect:
        """The simulated fleet takes the new count."""
        return effect if decision.replicas_to is None else replace(effect, replicas=decision.replicas_to)


class ScaleUp(_Scale):
    """One more replica, up to maxReplicas."""

    kind = action_kind("scale_up")

    def decide(self, cycle: Cycle, held: Sequence[Held]) -> None:
        """The first rule that held adds a replica, unless at the bound or in the scale-up cooldown."""
        if not held:
            return
        fleet, bounds, first = cycle.fleet, cycle.fleet.autoscaling, held[0]
        last = fleet.last(self.name, fleet.target)
        if fleet.replicas >= bounds.max_replicas:
            limit = fleet.roles[fleet.role].limit if fleet.role else None
            cycle.note(f"{first.rule.display_name()}: at maxReplicas ({bounds.max_replicas}){limit or ''}")
        elif last is not None and cycle.now - last < bounds.scale_up_cooldown:
            cycle.note(
                f"{first.rule.display_name()}: scale-up cooldown, "
                f"{bounds.scale_up_cooldown - (cycle.now - last):.0f}s left"
            )
        else:
            self.decide_count(cycle, first, fleet.replicas + 1, "scaling up")


class ScaleDown(_Scale):
    """One replica fewer, down to minReplicas."""

    kind = action_kind("scale_down")

    def holding(self, rule: Rule, held: list[Held], checked: int) -> list[Held]:
        """Scaling in on a replica-scoped rule needs every ready replica to agree."""
        return [] if rule.scope == "replica" and len(held) < checked else held

    def decide(self, cycle: Cycle, held: Sequence[Held]) -> None:
        """The first rule that held drops a replica, unless a scale-up signal, a bound, a domain or a cooldown
        stops it."""
        if not held or cycle.holding("scale_up"):
            return  # a scale-up signal, acted on or not, vetoes scaling down
        fleet, bounds, first = cycle.fleet, cycle.fleet.autoscaling, held[0]
        last = max(
            (
                t
                for t in (fleet.last("scale_up", fleet.target), fleet.last(self.name, fleet.target))
                if t is not None
            ),
            default=None,
        )
        if fleet.replicas <= bounds.min_replicas:
            cycle.note(f"{first.rule.display_name()}: at minReplicas ({bounds.min_replicas})")
        elif (keeper := fleet.domain_keeper(fleet.replicas - 1)) is not None:
            cycle.note(f"{first.rule.display_name()}: no scale-down, {keeper}")
        elif last is not None and cycle.now - last < bounds.scale_down_cooldown:
            cycle.note(
                f"{first.rule.display_name()}: scale-down cooldown, "
                f"{bounds.scale_down_cooldown - (cycle.now - last):.0f}s left"
            )
        else:
            self.decide_count(cycle, first, fleet.replicas - 1, "scaling down")
