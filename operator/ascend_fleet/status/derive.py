"""The status a pass observed, derived field by field into the status model (pure).

Equal inputs give an equal status, so a converged pass writes nothing; the model forbids unknown
fields, so a misspelt one fails here instead of being dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..api.v1alpha1 import (
    AscendInference,
    AscendInferenceStatus,
    Condition,
    GroupRestart,
    LayoutStatus,
    RolesStatus,
    RoleStatus,
)
from ..api.variants import fleet_weights, serving_split, traffic_shares, variant_of
from ..layout import Layout
from ..observed import ObservedReplica
from ..render import leader_selector
from .conditions import NAME_CONFLICT, ROUTING_UNAVAILABLE, set_condition


class RefusedChild(Protocol):
    """What derivation reads of the reconciler's record of a refused child (``reconcile.refusals.Refusal``)."""

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def reason(self) -> str: ...
    def sentence(self) -> str: ...


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
    refused: Mapping[tuple[str, str], RefusedChild] | None = None,
    routing_problem: str | None = None,
    placement_problem: tuple[str, str] | None = None,
    warnings: Sequence[str] = (),
    roles: Mapping[str, tuple[Layout, Mapping[int, ObservedReplica]]] | None = None,
) -> dict:
    """The status this pass observed; equal inputs give an equal dict, so a converged pass writes nothing.

    ``warnings`` (what renders but differs from what the spec asks for) end Ready's message, so that
    ``kubectl get ainf`` and ``kubectl describe`` show them as ``ascend-fleet validate`` does. ``roles`` (a
    two-role fleet: each role's layout and replicas) replaces ``layout`` and ``groups``: the counts are the
    roles' sums, so Ready needs every replica of both roles, and status.roles shows each.
    """
    generation = obj.metadata.get("generation")
    if roles:
        per_role = {role: count_replicas(each, found, rev) for role, (each, found) in roles.items()}
        counts = ReplicaCounts.total(per_role.values())
        existing_total = sum(c.existing for c in per_role.values())
        role_status = _roles_status(roles, per_role)
        layout_status = None
    else:
        counts = count_replicas(layout, groups, rev)
        existing_total, role_status, per_role = counts.existing, None, {}
        layout_status = LayoutStatus(
            npus_per_replica=layout.npus_per_replica,
            pods_per_replica=layout.pods_per_replica,
            npus_per_pod=layout.npus_per_pod,
            total_npus=layout.total_npus,
        )
    conditions = _conditions(
        stored_status(obj).get("conditions", []),
        counts,
        rev,
        restarts,
        now,
        generation,
        refused,
        routing_problem,
        placement_problem,
        warnings,
        per_role if roles else None,
    )
    status = AscendInferenceStatus(
        **kept_fields(obj.status),
        observed_generation=generation,
        replicas=existing_total,
        ready_replicas=counts.ready,
        updated_replicas=counts.updated,
        selector=",".join(f"{k}={v}" for k, v in leader_selector(obj.name).items()),
        revision=rev,
        layout=layout_status,
        roles=role_status,
        conditions=[Condition.model_validate(c) for c in conditions],
        group_restarts=[
            GroupRestart(replica=r["replica"], role=r.get("role"), count=r["count"], last_time=r["lastTime"])
            for r in sorted(restarts, key=lambda r: (r.get("role") or "", r["replica"]))
        ],
        # The split the rendered InferenceModelRewrite carries, read back from the object's annotation.
        traffic=traffic_shares(split_in_force(obj, groups, layout.pods_per_replica)) or None,
    )
    return wire_status(status)


# Status fields other writers own: status.actions is the control loop's, status.tuning `ascend-fleet tune`'s.
OTHER_WRITERS_FIELDS = frozenset({"actions", "tuning"})
# Every other status field a reconcile pass derives afresh.
DERIVED_FIELDS = frozenset(AscendInferenceStatus.model_fields) - OTHER_WRITERS_FIELDS
# The other writers' fields as the API spells them (a status merge patch leaves them out).
OTHER_WRITERS_KEYS = frozenset(
    AscendInferenceStatus.model_fields[name].alias or name for name in OTHER_WRITERS_FIELDS
)


def kept_fields(
    stored: AscendInferenceStatus | None, derived: frozenset[str] = DERIVED_FIELDS
) -> dict[str, Any]:
    """The stored status fields a pass does not derive, by field name, to carry into the new status."""
    if stored is None:
        return {}
    return {name: getattr(stored, name) for name in stored.model_fields_set - derived}


@dataclass(frozen=True)
class ReplicaCounts:
    """What a pass counted among the object's replicas (indexes below ``wanted`` unless said otherwise)."""

    wanted: int
    present: int  # with at least one pod not being deleted
    ready: int
    updated: int  # every pod at the current revision
    extra: int  # present at an index the spec no longer wants
    draining: int  # any index
    existing: int = 0  # present at any index

    @staticmethod
    def total(counts: Iterable[ReplicaCounts]) -> ReplicaCounts:
        """The sums of several roles' counts."""
        items = list(counts)
        return ReplicaCounts(
            *(sum(getattr(c, f.name) for c in items) for f in dataclasses.fields(ReplicaCounts))
        )


def count_replicas(layout: Layout, groups: Mapping[int, ObservedReplica], rev: str) -> ReplicaCounts:
    """What a pass counts among one role's (or a colocated fleet's) replicas."""
    wanted, ppr = layout.data, layout.pods_per_replica
    existing = [g for g in groups.values() if any(not p.deleting for p in g.pods)]
    return ReplicaCounts(
        wanted=wanted,
        present=len([g for g in existing if g.index < wanted]),
        ready=sum(1 for i in range(wanted) if i in groups and groups[i].ready(ppr)),
        updated=sum(1 for i in range(wanted) if i in groups and groups[i].at_revision(rev)),
        extra=sum(1 for g in existing if g.index >= wanted),
        draining=sum(1 for g in existing if g.draining),
        existing=len(existing),
    )


def _roles_status(
    roles: Mapping[str, tuple[Layout, Mapping[int, ObservedReplica]]], counts: Mapping[str, ReplicaCounts]
) -> RolesStatus:
    """status.roles: each role's replicas, ready and updated, and its layout."""
    return RolesStatus(
        **{
            role: RoleStatus(
                replicas=counts[role].existing,
                ready_replicas=counts[role].ready,
                updated_replicas=counts[role].updated,
                layout=LayoutStatus(
                    npus_per_replica=layout.npus_per_replica,
                    pods_per_replica=layout.pods_per_replica,
                    npus_per_pod=layout.npus_per_pod,
                    total_npus=layout.total_npus,
                ),
            )
            for role, (layout, _) in roles.items()
        }
    )


def _conditions(
    conditions: list[dict],
    counts: ReplicaCounts,
    rev: str,
    restarts: list[dict],
    now: float,
    generation: int | None,
    refused: Mapping[tuple[str, str], RefusedChild] | None,
    routing_problem: str | None,
    placement_problem: tuple[str, str] | None = None,
    warnings: Sequence[str] = (),
    per_role: Mapping[str, ReplicaCounts] | None = None,
) -> list[dict]:
    """Ready, Progressing and Degraded from this pass's counts; other condition types are kept."""
    wanted, ready, extra = counts.wanted, counts.ready, counts.extra
    readiness = f"{ready} of {wanted} replicas ready"
    if per_role:
        readiness += f" ({', '.join(f'{role} {c.ready} of {c.wanted}' for role, c in per_role.items())})"
    if refused:
        refusals = sorted(refused.values(), key=lambda r: (r.reason != NAME_CONFLICT, r.kind, r.name))
        sentence = "; ".join(r.sentence() for r in refusals)
        ready_condition = (False, refusals[0].reason, f"{readiness}; {sentence}")
    elif routing_problem:
        ready_condition = (False, ROUTING_UNAVAILABLE, f"{readiness}; {routing_problem}")
    elif placement_problem and ready < wanted:
        reason, sentence = placement_problem
        ready_condition = (False, reason, f"{readiness}; {sentence}")
    elif ready >= wanted:
        ready_condition = (True, "AllReplicasReady", readiness)
    else:
        ready_condition = (False, "ReplicasNotReady", readiness)
    if warnings:
        status, reason, message = ready_condition
        ready_condition = (status, reason, "; ".join([message, *(f"warning: {w}" for w in warnings)]))
    conditions = set_condition(conditions, "Ready", *ready_condition, now, generation)
    restarting = any(r["replica"] < wanted for r in restarts)
    progressing, reason = _progress(counts, restarting)
    at_revision = f"{counts.updated} of {wanted} replicas at revision {rev}"
    conditions = set_condition(
        conditions,
        "Progressing",
        progressing,
        reason,
        at_revision + (f", {extra} scaling in" if extra else ""),
        now,
        generation,
    )
    failing = [
        f"{r['role']} {r['replica']}" if r.get("role") else str(r["replica"])
        for r in sorted(restarts, key=lambda r: (r.get("role") or "", r["replica"]))
        if r["replica"] < wanted and r["count"] > 1
    ]
    return set_condition(
        conditions,
        "Degraded",
        bool(failing),
        "ReplicaFailing" if failing else "AsExpected",
        f"replicas {', '.join(failing)} keep failing; recreating with backoff" if failing else "",
        now,
        generation,
    )


def split_in_force(
    obj: AscendInference, groups: Mapping[int, ObservedReplica], pods_per_replica: int
) -> dict[str, int]:
    """The traffic split the rewrite carries and status.traffic shows: the annotation's, with the share of a
    variant that has no serving replica (its last one restarting or rolling) on a variant that serves."""
    variants = obj.spec.variants
    serving = {
        variant.name
        for index, group in groups.items()
        if index < obj.spec.parallelism.data
        and group.ready(pods_per_replica)
        and (variant := variant_of(variants, index)) is not None
    }
    return serving_split(fleet_weights(obj.spec, obj.metadata), serving)


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


def _progress(counts: ReplicaCounts, restarting: bool) -> tuple[bool, str]:
    """Whether the object is still progressing, and the reason."""
    wanted, present, ready, updated = counts.wanted, counts.present, counts.ready, counts.updated
    extra, draining = counts.extra, counts.draining
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
