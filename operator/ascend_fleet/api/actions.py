"""The rule actions, one row each: what the Action literal, the CRD's scope rule, the Events and the cooldowns read.

A row is an action's data; its behaviour (what it decides, how its result reads, what it writes and what the
simulator does with it) is its class in ``control.actions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scope = Literal["fleet", "replica"]
# The closed choice the control loop's action registry matches; the table below gives each its row.
ActionName = Literal["scale_up", "scale_down", "restart_service", "replace", "shift_traffic", "notify"]

# What a scope acts on, in the sentence of a refused rule.
SCOPE_WORDS = {"fleet": "the whole fleet", "replica": "one replica"}


@dataclass(frozen=True)
class ActionKind:
    """One rule action and everything about it that is data rather than behaviour."""

    name: ActionName
    scope: Scope  # the scope a rule without one gets
    scope_only: bool  # whether a rule with this action may name no other scope
    event_reason: str  # the Event reason of a carried-out decision (``DryRun`` + it for a dry run)
    warning: bool  # whether that Event is a Warning rather than Normal
    # The Autoscaling cooldown fields whose longest keeps the action's record (none: kept for one window).
    cooldowns: tuple[str, ...]
    meaning: str
    takes_variant: bool = False  # whether the rule names a variant in ``to`` (and only such a rule may)
    # Whether it recycles a replica that is healthy, to undo wear (fragmentation): what the memory report marks
    # as a restart and what the simulator's rules-without-restarts baseline leaves out.
    restarts_healthy: bool = False

    def scope_sentence(self) -> str:
        """Why a rule with this action and another scope is refused, and what to write instead."""
        return f"{self.name} acts on {SCOPE_WORDS[self.scope]}; use scope: {self.scope} (the default)"


ACTIONS = (
    ActionKind(
        name="scale_up",
        scope="fleet",
        scope_only=False,
        event_reason="ScaleUp",
        warning=False,
        cooldowns=("scale_up_cooldown", "scale_down_cooldown"),
        meaning="one more replica, up to maxReplicas",
    ),
    ActionKind(
        name="scale_down",
        scope="fleet",
        scope_only=False,
        event_reason="ScaleDown",
        warning=False,
        cooldowns=("scale_down_cooldown",),
        meaning="one replica fewer, down to minReplicas",
    ),
    ActionKind(
        name="restart_service",
        scope="replica",
        scope_only=True,
        event_reason="RuleRestart",
        warning=False,
        cooldowns=("restart_cooldown",),
        meaning="drain, delete and recreate the replica the condition holds on",
        restarts_healthy=True,
    ),
    ActionKind(
        name="replace",
        scope="replica",
        scope_only=True,
        event_reason="RuleReplace",
        warning=True,
        cooldowns=("restart_cooldown",),
        meaning="drain and recreate the replica on NPUs the device plugin reports healthy (a faulty NPU's replica)",
    ),
    ActionKind(
        name="shift_traffic",
        scope="fleet",
        scope_only=False,
        event_reason="ShiftTraffic",
        warning=False,
        cooldowns=("shift_cooldown",),
        meaning="move `step` percent of the requests to the variant `to` (spec.variants), taken from the others",
        takes_variant=True,
    ),
    ActionKind(
        name="notify",
        scope="fleet",
        scope_only=False,
        event_reason="RuleNotify",
        warning=True,
        cooldowns=(),
        meaning="a Warning Event only, at most once per window",
    ),
)
ACTION_NAMES = tuple(kind.name for kind in ACTIONS)
# The list of actions in a field's description.
ACTION_LIST = ", ".join(ACTION_NAMES[:-1]) + " or " + ACTION_NAMES[-1]
# The actions whose rules name a variant in ``to``.
VARIANT_ACTIONS = tuple(kind.name for kind in ACTIONS if kind.takes_variant)
# The actions that recycle a healthy replica to undo wear.
HEALTHY_RESTART_ACTIONS = tuple(kind.name for kind in ACTIONS if kind.restarts_healthy)


def action_kind(name: str) -> ActionKind:
    """The row of an action name (KeyError for a name no row has)."""
    rows: dict[str, ActionKind] = {kind.name: kind for kind in ACTIONS}
    return rows[name]


def variant_sentence() -> str:
    """Why a rule's ``to`` is refused: it is missing where the action needs it, or given where it does not."""
    named = " or ".join(VARIANT_ACTIONS)
    return f"{named} needs to (the variant to move traffic to), and only {named} takes to"
