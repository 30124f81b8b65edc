"""Which nodes are dead, read from their Leases in ``kube-node-lease`` as the node lifecycle controller does.

Pure: each list of the Leases updates, per node, the ``renewTime`` last seen and when it was first seen on the
operator's own clock. A node is dead once that ``renewTime`` has stayed the same for
:data:`~.timing.NODE_LEASE_STALE_SECONDS` on that clock. Timing the observation rather than reading
``renewTime`` as a clock keeps a skew between the node's clock and the operator's out of the decision, and
an operator that just started calls no node dead before it has watched it for that long.

A node without a Lease (or one without ``renewTime``) is never called dead: nothing says it stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .timing import NODE_LEASE_STALE_SECONDS


@dataclass(frozen=True)
class Renewal:
    """A node Lease's ``renewTime`` and when (operator clock, seconds) this value was first seen."""

    renew_time: str
    seen: float


def observe_leases(previous: Mapping[str, Renewal], leases: Iterable[dict], now: float) -> dict[str, Renewal]:
    """The renewals after one list of the node Leases at ``now``: a changed ``renewTime`` is seen anew."""
    current = {}
    for lease in leases:
        node = (lease.get("metadata") or {}).get("name") or ""
        renew_time = (lease.get("spec") or {}).get("renewTime") or ""
        if not node or not renew_time:
            continue
        before = previous.get(node)
        current[node] = before if before and before.renew_time == renew_time else Renewal(renew_time, now)
    return current


def dead_nodes(
    renewals: Mapping[str, Renewal], now: float, stale: float = NODE_LEASE_STALE_SECONDS
) -> frozenset[str]:
    """The nodes whose Lease has not been renewed for more than ``stale`` seconds at ``now``; none when that is
    every node: all of them silent at once says more about the API server or the network than about the nodes
    (the node lifecycle controller stops evicting in such a full disruption too), and there would be no node
    to make a replica again on."""
    dead = frozenset(node for node, renewal in renewals.items() if now - renewal.seen > stale)
    return frozenset() if dead and len(dead) == len(renewals) else dead


def watched_through(last_list: float | None, now: float, gap: float) -> bool:
    """Whether the Leases were listed without a gap longer than ``gap`` up to ``now``. After a gap (an API
    outage, the operator's own stall) a renewal may have come and gone unseen, so every node is watched
    afresh, as by an operator that just started: none is called dead before ``stale`` seconds more."""
    return last_list is not None and now - last_list <= gap
