"""The status a pass observed, derived field by field into the status model (pure).

Equal inputs give an equal status, so a converged pass writes nothing; the model forbids unknown
fields, so a misspelt one fails here instead of being dropped.
"""

from __future__ import annotations

from ..api.v1alpha1 import AscendInference, AscendInferenceStatus
from ..layout import Layout
from ..render import leader_selector
from ..status import ObservedReplica, set_condition
from .refusals import NAME_CONFLICT, Refusal
from .routing import ROUTING_UNAVAILABLE


def stored_status(obj: AscendInference) -> dict:
    """The status as stored (only the fields that were written), so comparing it with ours is exact."""
    if obj.status is None:
        return {}
    return obj.status.model_dump(by_alias=True, exclude_unset=True, mode="json")


def derive_status(
    obj: AscendInference,
    layout: Layout,
    groups: dict[int, ObservedReplica],
    rev: str,
    restarts: list[dict],
    now: float,
    refused: dict[tuple[str, str], Refusal] | None = None,
    routing_problem: str | None = None,
) -> dict:
    """The status this pass observed; equal inputs give an equal dict, so a converged pass writes nothing."""
    wanted, ppr = layout.data, layout.pods_per_replica
    previous = stored_status(obj)
    generation = obj.metadata.get("generation")
    existing = [g for g in groups.values() if any(not p.deleting for p in g.pods)]
    ready = sum(1 for i in range(wanted) if i in groups and groups[i].ready(ppr))
    updated = sum(1 for i in range(wanted) if i in groups and groups[i].at_revision(rev))
    extra = sum(1 for g in existing if g.index >= wanted)
    draining = sum(1 for g in existing if g.draining)
    failing = sorted(r["replica"] for r in restarts if r["replica"] < wanted and r["count"] > 1)

    conditions = previous.get("conditions", [])
    if refused:
        refusals = sorted(refused.values(), key=lambda r: (r.reason != NAME_CONFLICT, r.kind, r.name))
        conditions = set_condition(
            conditions,
            "Ready",
            False,
            refusals[0].reason,
            f"{ready} of {wanted} replicas ready; " + "; ".join(r.sentence() for r in refusals),
            now,
            generation,
        )
    elif routing_problem:
        conditions = set_condition(
            conditions,
            "Ready",
            False,
            ROUTING_UNAVAILABLE,
            f"{ready} of {wanted} replicas ready; {routing_problem}",
            now,
            generation,
        )
    else:
        conditions = set_condition(
            conditions,
            "Ready",
            ready >= wanted,
            "AllReplicasReady" if ready >= wanted else "ReplicasNotReady",
            f"{ready} of {wanted} replicas ready",
            now,
            generation,
        )
    restarting = any(r["replica"] < wanted for r in restarts)
    progressing, reason = _progress(
        wanted, len([g for g in existing if g.index < wanted]), ready, updated, extra, draining, restarting
    )
    conditions = set_condition(
        conditions,
        "Progressing",
        progressing,
        reason,
        f"{updated} of {wanted} replicas at revision {rev}" + (f", {extra} scaling in" if extra else ""),
        now,
        generation,
    )
    conditions = set_condition(
        conditions,
        "Degraded",
        bool(failing),
        "ReplicaFailing" if failing else "AsExpected",
        f"replicas {', '.join(map(str, failing))} keep failing; recreating with backoff" if failing else "",
        now,
        generation,
    )
    status = AscendInferenceStatus.model_validate(
        {
            **previous,
            "observedGeneration": generation,
            "replicas": len(existing),
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "selector": ",".join(f"{k}={v}" for k, v in leader_selector(obj.name).items()),
            "revision": rev,
            "layout": {
                "npusPerReplica": layout.npus_per_replica,
                "podsPerReplica": ppr,
                "npusPerPod": layout.npus_per_pod,
                "totalNpus": layout.total_npus,
            },
            "conditions": conditions,
            "groupRestarts": sorted(restarts, key=lambda r: r["replica"]),
        }
    )
    return wire_status(status)


def wire_status(status: AscendInferenceStatus) -> dict:
    """A status as written: through the model (the CRD's schema is generated from it), camelCase, no nulls."""
    return status.wire()


def canonical_status(stored: dict | None) -> dict:
    """A stored status in the form :func:`wire_status` writes, so "nothing changed" compares exactly.

    Unreadable stored status (hand-edited, an older operator) compares unequal, and is rewritten.
    """
    try:
        return wire_status(AscendInferenceStatus.model_validate(stored or {}))
    except ValueError:
        return {}


def _progress(
    wanted: int, present: int, ready: int, updated: int, extra: int, draining: int, restarting: bool
) -> tuple[bool, str]:
    # A replica that is not ready yet is "Starting" unless the operator has restarted a gang or is
    # draining one: a new object's pods read as starting, not as recovering from a failure.
    if extra:
        return True, "ScalingDown"
    if present < wanted:
        return True, "ScalingUp" if present else "Creating"
    if updated < wanted:
        return True, "RollingUpdate"
    if draining or (ready < wanted and restarting):
        return True, "Recovering"
    if ready < wanted:
        return True, "Starting"
    return False, "Converged"
