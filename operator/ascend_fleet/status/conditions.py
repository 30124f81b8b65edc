"""Standard Kubernetes conditions: keyed by type, lastTransitionTime moves only when status flips."""

from __future__ import annotations

from typing import Literal

from ..api.times import rfc3339
from ..api.v1alpha1 import Condition

CONDITION_TYPES = ("Ready", "Progressing", "Degraded", "MetricsAvailable", "KVTransfer")
# Ready=False reasons the reconciler finds (reconcile/refusals.py, reconcile/routing.py) and status derivation words.
CHILD_REJECTED = "ChildRejected"
NAME_CONFLICT = "NameConflict"
ROUTING_UNAVAILABLE = "RoutingUnavailable"


def set_condition(
    conditions: list[dict],
    type_: str,
    status: bool | Literal["True", "False", "Unknown"],
    reason: str,
    message: str,
    now: float,
    generation: int | None = None,
) -> list[dict]:
    """A new conditions list with one condition set; other types are kept as they are."""
    value = status if isinstance(status, str) else ("True" if status else "False")
    previous = next((c for c in conditions if c.get("type") == type_), None)
    changed_at = (
        previous["lastTransitionTime"] if previous and previous.get("status") == value else rfc3339(now)
    )
    # Through the status model: the CRD's schema is generated from it, so what is written is what it stores.
    condition = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=changed_at,
        observed_generation=generation,
    ).wire()
    rest = [c for c in conditions if c.get("type") != type_]
    return sort_conditions([*rest, condition])


def sort_conditions(conditions: list[dict]) -> list[dict]:
    """The project's one order of conditions (stable output means no rewrite for order alone)."""
    return sorted(conditions, key=_order)


def _order(condition: dict) -> tuple[int, str]:
    kind = condition.get("type", "")
    return (CONDITION_TYPES.index(kind) if kind in CONDITION_TYPES else len(CONDITION_TYPES), kind)
