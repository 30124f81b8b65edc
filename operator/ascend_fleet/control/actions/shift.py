"""``shift_traffic``: move ``step`` percent of the requests to the variant ``to``.

At most once per ``shiftCooldown`` in either direction, so a rule and its way back cannot flap faster than the
metric can show the effect; the first holding rule in spec order acts, and one whose variant has everything
already does nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ...api import names
from ...api.actions import action_kind
from ...api.variants import describe_weights, shifted, weights_text
from .base import FLEET, Effect, RuleAction, Write

if TYPE_CHECKING:
    from ..model import ControlDecision, Cycle, Held


class ShiftTraffic(RuleAction):
    """Move part of the requests to one variant, taken from the others."""

    kind = action_kind("shift_traffic")

    def decide(self, cycle: Cycle, held: Sequence[Held]) -> None:
        """The first rule that held moves its step, unless its variant has it all or the cooldown runs."""
        shifts = [h for h in held if h.rule.to is not None]
        if not shifts:
            return
        fleet, first, to = cycle.fleet, shifts[0], str(shifts[0].rule.to)
        cooldown, last = fleet.autoscaling.shift_cooldown, fleet.last(self.name, FLEET)
        after = shifted(fleet.traffic, to, first.rule.step)
        if to not in fleet.traffic or after == dict(fleet.traffic):
            cycle.note(f"{first.rule.display_name()}: {to} has all the traffic already")
        elif last is not None and cycle.now - last < cooldown:
            cycle.note(
                f"{first.rule.display_name()}: shift cooldown, {cooldown - (cycle.now - last):.0f}s left"
            )
        else:
            before = tuple(fleet.traffic.items())
            cycle.decide(first, self.name, traffic_from=before, traffic_to=tuple(after.items()))

    def describe(self, decision: ControlDecision) -> str:
        """The split before and after."""
        before, after = (
            describe_weights(dict(decision.traffic_from)),
            describe_weights(dict(decision.traffic_to)),
        )
        return f"traffic {before} -> {after}"

    def writes(self, decision: ControlDecision, now: float) -> tuple[Write, ...]:
        """The new split in the traffic annotation, from which the reconciler renders the picker's rewrite."""
        annotations = {names.ANNOTATION_TRAFFIC: weights_text(dict(decision.traffic_to))}
        return (Write(names.KIND, decision.name, {"metadata": {"annotations": annotations}}, guarded=True),)

    def simulate(self, decision: ControlDecision, effect: Effect) -> Effect:
        """The simulated router takes the new split."""
        return replace(effect, traffic=decision.traffic_to)
