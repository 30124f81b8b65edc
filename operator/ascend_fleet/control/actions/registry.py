"""The one place an action name selects its action.

Production selection is closed: ``builtin_action`` matches every member of the ``ActionName`` literal and
ends in ``assert_never``, so a name added to the literal without an action fails the type check. The
registry built from it is the seam that is open: ``registered_action`` adds an action for the duration of
a ``with`` block (a test, or a future action while it is being written) and removes it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, assert_never

from ...api.actions import ActionName
from .base import RuleAction
from .notify import Notify
from .recycle import Replace, RestartService
from .scale import ScaleDown, ScaleUp
from .shift import ShiftTraffic

if TYPE_CHECKING:
    from ..model import ControlDecision


def builtin_action(name: ActionName) -> RuleAction:
    """The action of a production action name."""
    match name:
        case "scale_up":
            return ScaleUp()
        case "scale_down":
            return ScaleDown()
        case "restart_service":
            return RestartService()
        case "replace":
            return Replace()
        case "shift_traffic":
            return ShiftTraffic()
        case "notify":
            return Notify()
        case _:
            assert_never(name)


# The order a cycle asks the actions in, which is the order of its decisions: scaling first (a scale-up vetoes
# a scale-down), then a replacement before a restart (both spend one disruption budget), then traffic, then Events.
DECIDING_ORDER: tuple[ActionName, ...] = (
    "scale_up",
    "scale_down",
    "replace",
    "restart_service",
    "shift_traffic",
    "notify",
)
_ACTIONS: dict[str, RuleAction] = {name: builtin_action(name) for name in DECIDING_ORDER}


class UnknownAction(KeyError):
    """An action name no action is registered for."""


def action_for(name: str) -> RuleAction:
    """The action registered for a name."""
    try:
        return _ACTIONS[name]
    except KeyError:
        raise UnknownAction(name) from None


def decision_result(decision: ControlDecision) -> str:
    """What a decision did, in the words of status.actions, as its action says it."""
    return action_for(decision.action).result(decision)


def decision_message(decision: ControlDecision) -> str:
    """The Event text of a decision, as its action says it."""
    return action_for(decision.action).message(decision)


def deciding() -> tuple[RuleAction, ...]:
    """Every registered action in the order a cycle asks them; ones registered for a block come last."""
    return tuple(_ACTIONS.values())


@contextmanager
def registered_action(action: RuleAction) -> Iterator[RuleAction]:
    """Register an action of a new name for the block, and unregister it afterwards."""
    if action.name in _ACTIONS:
        raise ValueError(f"action {action.name!r} is registered already")
    _ACTIONS[action.name] = action
    try:
        yield action
    finally:
        del _ACTIONS[action.name]
