"""What every rule action is: one class behind one interface, its data a row of ``api.actions``.

An action decides (turns the rules that held for it into decisions and notes), describes a decision in the
words of ``status.actions``, says what carrying it out writes, and says what the simulator does with it.
It writes nothing itself: the control loop sends its writes, so the actions stay pure and testable without a
cluster, and the simulator runs the same decisions the operator does.

The control loop's values (:mod:`..model`) appear here in annotations only, with the name of the fleet target:
the evaluation asks the actions, not the other way round, and both take those values from below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...api.actions import ActionKind
from ...api.catalog import format_value
from ..model import FLEET as FLEET  # the target of a fleet-scoped rule, re-exported

if TYPE_CHECKING:
    from ...api.v1alpha1 import Rule
    from ..model import ControlDecision, Cycle, Held


@dataclass(frozen=True)
class Write:
    """One merge patch that carries a decision out, on an object in the decision's namespace."""

    kind: str
    name: str
    patch: dict
    # Sent with the resourceVersion of the loop's own status write, so a change since the record refuses it.
    guarded: bool = False


@dataclass(frozen=True)
class Effect:
    """What one simulator tick does with its decisions: a new replica count, restarts, a new traffic split."""

    replicas: int | None = None
    restart: tuple[int, ...] = ()
    traffic: tuple[tuple[str, int], ...] | None = None


class RuleAction(ABC):
    """One rule action's behaviour; its data is ``kind``."""

    kind: ActionKind
    # Its records are paced per rule as well as per target, so two rules on one target each get theirs.
    paced_per_rule: bool = False

    @property
    def name(self) -> str:
        """The action's name, as rules and status.actions spell it."""
        return self.kind.name

    def holding(self, rule: Rule, held: list[Held], checked: int) -> list[Held]:
        """The targets a rule acts on, given the ``held`` ones among the ``checked`` it was checked on."""
        return held

    @abstractmethod
    def decide(self, cycle: Cycle, held: Sequence[Held]) -> None:
        """Turn the rules that held for this action (in spec order) into the cycle's decisions and notes."""

    @abstractmethod
    def describe(self, decision: ControlDecision) -> str:
        """What the decision does, in the words of status.actions (a dry run's prefix aside)."""

    def result(self, decision: ControlDecision) -> str:
        """What happened, in the words of status.actions: the description, marked as not done in a dry run."""
        text = self.describe(decision)
        return f"would have done: {text}" if decision.dry_run else text

    def message(self, decision: ControlDecision) -> str:
        """The Event text: the rule, the value that proved it and what was done."""
        value = "" if decision.value is None else f" (value {format_value(decision.metric, decision.value)})"
        return f"{decision.rule}{value} on {decision.target}: {self.result(decision)}"

    def writes(self, decision: ControlDecision, now: float) -> tuple[Write, ...]:
        """What carrying the decision out writes; nothing, unless the action changes something."""
        return ()

    def simulate(self, decision: ControlDecision, effect: Effect) -> Effect:
        """The simulator tick's effect with the decision applied; unchanged, unless the simulator models it."""
        return effect
