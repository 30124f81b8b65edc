"""Why a replica's pods are not placed, and when a half-placed gang gives its NPUs back (pure).

A pod the scheduler cannot place carries ``PodScheduled=False`` with the scheduler's sentence; a pod whose
``schedulerName`` names no running scheduler carries no PodScheduled condition at all, so after
``reconcile.schedulerGrace`` its silence is the finding. Without Volcano nothing places a gang whole: the
ranks that fit bind and hold their NPUs while the others wait, so after ``reconcile.gangTimeout`` the
replica's pods are deleted and recreated with the restart backoff (Kueue's waitForPodsReady does the same
to a workload). With Volcano the PodGroup binds a gang whole or not at all, so there is nothing to give back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..api.availability import TOPOLOGY_KEYS, Availability
from ..api.settings import ReconcileSettings
from ..observed import ObservedPod, ObservedReplica

REASON_UNSCHEDULABLE = "Unschedulable"  # the scheduler answered: no node fits
REASON_NO_SCHEDULER = "NoScheduler"  # nothing answered the pod's schedulerName
REASON_GANG_RELEASED = "GangReleased"  # a half-placed gang's pods were deleted to free their NPUs
# The words kube-scheduler's PodTopologySpread filter puts in its sentence (ErrReasonConstraintsNotMatch, "node(s)
# didn't match pod topology spread constraints", with " (missing required label)" for unlabelled nodes).
SPREAD_REFUSAL = "pod topology spread constraints"


@dataclass(frozen=True)
class Unplaced:
    """One replica's first pod that is not placed, and why."""

    replica: int
    pod: str
    reason: str  # REASON_UNSCHEDULABLE or REASON_NO_SCHEDULER
    why: str  # the scheduler's sentence, or that no scheduler of that name answers


def answering_schedulers(groups: Iterable[ObservedReplica]) -> set[str]:
    """The schedulers that bound or answered some pod of the object: a busy one is not a missing one."""
    return {p.scheduler_name for g in groups for p in g.pods if p.node_name or p.scheduling_answered}


def _unplaced_pod(
    pod: ObservedPod, replica: int, now: float, grace: float, answering: set[str]
) -> Unplaced | None:
    """Why this unbound pod is not placed, once that is known (None while the scheduler may still answer)."""
    if pod.node_name or pod.deleting:
        return None
    if pod.unschedulable is not None:
        return Unplaced(replica, pod.name, REASON_UNSCHEDULABLE, pod.unschedulable)
    silent = not pod.scheduling_answered and pod.scheduler_name not in answering
    if silent and pod.created is not None and now - pod.created >= grace:
        why = f"it stays Pending and no scheduler named {pod.scheduler_name} answers"
        return Unplaced(replica, pod.name, REASON_NO_SCHEDULER, why)
    return None


def unplaced(
    group: ObservedReplica, now: float, settings: ReconcileSettings, answering: set[str]
) -> Unplaced | None:
    """The first of the replica's pods known not to be placed, or None."""
    grace = settings.scheduler_grace
    found = (_unplaced_pod(p, group.index, now, grace, answering) for p in group.pods)
    return next((u for u in found if u is not None), None)


def next_placement_look(group: ObservedReplica, now: float, settings: ReconcileSettings) -> float | None:
    """Seconds until a silent pod of this replica reads as having no scheduler (None if none is waiting)."""
    waits = [
        p.created + settings.scheduler_grace - now
        for p in group.pods
        if not p.node_name and not p.deleting and not p.scheduling_answered and p.created is not None
    ]
    future = [w for w in waits if w > 0]
    return min(future) if future else None


def hoarding_since(group: ObservedReplica) -> float | None:
    """When the oldest unbound pod of a partly bound gang was created (None if the gang does not hoard)."""
    alive = [p for p in group.pods if not p.deleting]
    if not any(p.node_name for p in alive):
        return None
    waiting = [p.created for p in alive if not p.node_name and p.created is not None]
    return min(waiting) if waiting else None


def gang_release_due(
    group: ObservedReplica, now: float, settings: ReconcileSettings, volcano: bool
) -> tuple[bool, float | None]:
    """Whether the gang should give its placed pods back now, else seconds until it should (or None)."""
    since = None if volcano else hoarding_since(group)
    if since is None:
        return False, None
    remaining = since + settings.gang_timeout - now
    return (True, None) if remaining <= 0 else (False, remaining)


def release_sentence(group: ObservedReplica, timeout: float) -> str:
    """The Event's words for a released gang: which pods held nodes and which could not be placed."""
    placed = [f"{p.name} on {p.node_name}" for p in group.pods if p.node_name and not p.deleting]
    waiting = [p.name for p in group.pods if not p.node_name and not p.deleting]
    return (
        f"{group.label}: {', '.join(waiting)} not placed within {timeout:g}s; deleting the gang to "
        f"free the NPUs of {', '.join(placed)}"
    )


def spread_hint(availability: Availability | None, why: str) -> str:
    """What would fit, when the scheduler refused a pod for spec.availability's spread ("" otherwise).

    With fewer eligible domains than ``minDomains`` the scheduler counts the missing ones as empty, so every
    replica past the first per domain is refused: the fix is more domains or a smaller ``minDomains``.
    """
    if availability is None or SPREAD_REFUSAL not in why:
        return ""
    key = TOPOLOGY_KEYS[availability.spread]
    return (
        f" (spec.availability spreads replicas over at least {availability.min_domains} {availability.spread}s"
        f" by {key}: give the pods' eligible nodes that many distinct {key} values, or lower"
        f" spec.availability.minDomains)"
    )


def placement_problem(
    found: list[Unplaced], availability: Availability | None = None
) -> tuple[str, str] | None:
    """The Ready reason and sentence for replicas that cannot be placed, replicas with equal causes together.

    e.g. ``replica 0 cannot be placed: pod a-0-1: 0/2 nodes are available: 2 Insufficient huawei.com/Ascend910.``
    A refusal for ``spec.availability``'s spread also says what would fit (:func:`spread_hint`).
    """
    if not found:
        return None
    by_cause: dict[tuple[str, str], list[Unplaced]] = {}
    for item in sorted(found, key=lambda u: u.replica):
        by_cause.setdefault((item.reason, item.why), []).append(item)
    parts = []
    for (_, why), items in by_cause.items():
        replicas = ", ".join(str(u.replica) for u in items)
        plural = "s" if len(items) > 1 else ""
        hint = spread_hint(availability, why)
        parts.append(f"replica{plural} {replicas} cannot be placed: pod {items[0].pod}: {why}{hint}")
    reason = (
        REASON_UNSCHEDULABLE if any(u.reason == REASON_UNSCHEDULABLE for u in found) else REASON_NO_SCHEDULER
    )
    return reason, "; ".join(parts)
