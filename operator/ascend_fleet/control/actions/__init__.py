"""The rule actions: one class per action behind one interface (``base.RuleAction``), chosen by ``registry``.

Each action decides from the rules that held for it, describes its decisions, returns what carrying one out
writes (the control loop writes it) and applies it to a simulator tick. Pure code: no client, no cluster.
"""

from .base import FLEET, Effect, RuleAction, Write
from .registry import (
    UnknownAction,
    action_for,
    builtin_action,
    deciding,
    decision_message,
    decision_result,
    registered_action,
)

__all__ = [
    "FLEET",
    "Effect",
    "RuleAction",
    "UnknownAction",
    "Write",
    "action_for",
    "builtin_action",
    "deciding",
    "decision_message",
    "decision_result",
    "registered_action",
]
