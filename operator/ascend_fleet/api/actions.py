"""The rule actions, one row each: what the Action literal, the CRD's scope rule, the Events and the cooldowns read.

A new action is a row here plus its effect (what ``control.evaluate`` decides and ``control.loop`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scope = Literal["fleet", "replica"]

# What a scope acts on, in the sentence of a refused rule.
SCOPE_WORDS = {"fleet": "the whole fleet", "replica": "one replica"}


@dataclass(frozen=True)
class ActionKind:
    """One rule action and everything about it that is data rather than behaviour."""

    name: str
    scope: Scope  # the scope a rule without one gets
    scope_only: bool  # whether a rule with this action may name no other scope
    event_reason: str  # the Event reason of a carried-out decision (``DryRun`` + it for a dry run)
    warning: bool  # whether that Event is a Warning rather than Normal
    # The Autoscaling cooldown fields whose longest keeps the action's record (none: kept for one window).
    cooldowns: tuple[str, ...]
    meaning: str

    def scope_sentence(self) -> str:
        """Why a rule with this action and another scope is refused, and what to write instead."""
        return f"{self.name} acts on {SCOPE_WORDS[self.scope]}; use scope: {self.scope} (the default)"


ACTIONS = (
    ActionKind(
        "scale_up", "fleet", False, "ScaleUp", False, ("scale_up_cooldown", "scale_down_cooldown"),
        "one more replica, up to maxReplicas",
    ),
    ActionKind(
        "scale_down", "fleet", False, "ScaleDown", False, ("scale_down_cooldown",),
        "one replica fewer, down to minReplicas",
    ),
    ActionKind(
        "restart_service", "replica", True, "RuleRestart", False, ("restart_cooldown",),
        "drain, delete and recreate the replica the condition holds on",
    ),
    ActionKind(
        "replace", "replica", True, "RuleReplace", True, ("restart_cooldown",),
        "drain and recreate the replica on NPUs the device plugin reports healthy (a faulty NPU's replica)",
    ),
    ActionKind(
        "shift_traffic", "fleet", False, "ShiftTraffic", False, ("shift_cooldown",),
        "move `step` percent of the requests to the variant `to` (spec.variants), taken from the others",
    ),
    ActionKind("notify", "fleet", False, "RuleNotify", True, (), "a Warning Event only, at most once per window"),
)  # fmt: skip
ACTION_NAMES = tuple(kind.name for kind in ACTIONS)
# The list of actions in a field's description.
ACTION_LIST = ", ".join(ACTION_NAMES[:-1]) + " or " + ACTION_NAMES[-1]


def action_kind(name: str) -> ActionKind:
    """The row of an action name (KeyError for a name no row has)."""
    return {kind.name: kind for kind in ACTIONS}[name]
