"""What a stored status says about serving: whether an AscendInference serves in full."""

from __future__ import annotations

from ..observed import get_condition


def fleet_serving(obj: dict) -> bool:
    """Whether an AscendInference serves in full: its ``Ready`` condition is True and every replica its spec asks
    for is ready (``kubectl wait --for=condition=Ready`` returns, and no replica is still starting)."""
    status = obj.get("status") or {}
    ready = get_condition(status.get("conditions") or [], "Ready") or {}
    desired = int(((obj.get("spec") or {}).get("parallelism") or {}).get("data") or 0)
    return ready.get("status") == "True" and int(status.get("readyReplicas") or 0) >= desired > 0
