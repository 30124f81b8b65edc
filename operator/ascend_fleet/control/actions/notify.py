"""``notify``: a Warning Event only, at most once per window length for the same rule and target."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...api.actions import action_kind
from .base import RuleAction

if TYPE_CHECKING:
    from ..model import ControlDecision, Cycle, Held


class Notify(RuleAction):
    """Record and announce; change nothing."""

    kind = action_kind("notify")
    paced_per_rule = True

    def decide(self, cycle: Cycle, held: Sequence[Held]) -> None:
        """Each rule that held notifies, once per window for its target."""
        for h in held:
            # Each notification is about a fresh window, so one breach is not reported every cycle.
            spacing = max(float(h.rule.for_), cycle.step)
            last = cycle.fleet.last(self.name, h.target, h.rule.display_name())
            if last is None or cycle.now - last >= spacing:
                cycle.decide(h, self.name)

    def describe(self, decision: ControlDecision) -> str:
        """Only that it notified: the Event is the whole of it."""
        return "notified"
