"""The reconciler's decisions, as a pure function of spec, observed children and the clock.

Level-based: every pass compares what the spec asks for with what exists and returns the
writes that close the gap (and nothing when there is no gap). Semantics follow LeaderWorkerSet:
a replica is a gang (any failed or missing rank recreates the whole replica, with a per-replica
backoff); template changes roll out replica by replica within ``disruption.maxUnavailable``;
scale-in, rollouts and rule restarts all drain first (leader leaves the Service, in-flight
requests get ``drainSeconds``) and only then delete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..api import names
from ..api.settings import NetworkPolicySettings, ReconcileSettings
from ..api.times import parse_rfc3339, rfc3339_ms
from ..api.v1alpha1 import AscendInference, AscendInferenceStatus, Condition
from ..layout import Layout, plan_roles
from ..observed import ObservedReplica, get_condition, observed_replicas
from ..observed.pods import pod_role
from ..render import (
    Owner,
    drain_patch,
    network_policy,
    pod_group_name,
    render_pdb,
    render_replica,
    render_services,
    revision,
    uses_volcano,
)
from ..render.routing import PickerSettings
from ..status import set_condition
from ..status.conditions import ROUTING_UNAVAILABLE
from ..status.derive import derive_status, kept_fields, stored_status, wire_status
from .drift import drifted, managed_spec
from .nodeloss import avoid_nodes, fail_over_lost
from .placement import (
    REASON_GANG_RELEASED,
    REASON_NO_SCHEDULER,
    REASON_UNSCHEDULABLE,
    answering_schedulers,
    gang_release_due,
    next_placement_look,
    placement_problem,
    release_sentence,
    unplaced,
)
from .routing import plan_routing
from .timing import REQUEUE_AFTER_WRITE_SECONDS, ROLLOUT_BLOCKED_SECONDS
from .writes import Delete, Event, Observed, PassPlan, Patch


def backoff_delay(count: int, settings: ReconcileSettings) -> float:
    """Delay before recreating a replica after its ``count``-th failure: 0, then initial doubling to max."""
    if count <= 1:
        return 0.0
    return min(settings.backoff_initial * 2 ** (count - 2), settings.backoff_max)


def plan_pass(
    obj: AscendInference,
    layout: Layout,
    observed: Observed,
    now: float,
    settings: ReconcileSettings,
    picker: PickerSettings | None = None,
    routing_enabled: bool = True,
    warnings: Sequence[str] = (),
    network: NetworkPolicySettings | None = None,
) -> PassPlan:
    """Everything this pass should write for a valid AscendInference (routing only if ``routing_enabled``);
    ``warnings`` (validate's, for a spec that renders but differs from what it asks) go into Ready's message;
    ``network`` is the operator's NetworkPolicy setting, by default on.

    A two-role fleet (spec.disaggregation) plans each role's replicas as a colocated fleet's, with the role's
    own layout; pods of a role the spec no longer has (or a colocated fleet's pods beside two roles, and the
    other way round) are surplus, drained and deleted like a scale-in. A rollout takes decode first
    (:func:`may_roll_out`).
    """
    result = PassPlan()
    owner = Owner.of(obj)
    rev = revision(obj.spec, owner.name, layout)
    _plan_services(obj, layout, owner, observed, now, settings, result, network)
    routing_problem = plan_routing(obj, owner, observed, now, settings, picker, result, routing_enabled)
    stored = stored_status(obj).get("groupRestarts", [])
    wanted_roles: dict[str | None, Layout] = {role: each for role, each in plan_roles(obj.spec).items()}
    wanted_roles = wanted_roles or {None: layout}
    present = {pod_role(p) for p in observed.pods}
    roles = [*wanted_roles, *sorted(r for r in present if r not in wanted_roles and r is not None)]
    found = {role: observed_replicas(observed.pods, role) for role in roles}
    scopes: list[RoleScope] = []
    for role in roles:
        scope = RoleScope(role, wanted_roles.get(role), found[role])
        restarts = {r["replica"]: r for r in stored if r.get("role") == role}
        rolls = may_roll_out(role, found, rev)
        _plan_replicas(obj, owner, scope, restarts, rev, observed, now, settings, result, rolls)
        scopes.append(scope)
    if None not in wanted_roles and None in present:  # a colocated fleet's pods beside two roles
        scope = RoleScope(None, None, observed_replicas(observed.pods))
        _plan_replicas(obj, owner, scope, {}, rev, observed, now, settings, result)
    unplaced_problem = placement_problem(
        [item for scope in scopes for item in scope.unplaced], obj.spec.availability
    )
    restarts_out = [r for scope in scopes for r in scope.restarts]
    result.status = derive_status(
        obj,
        layout,
        scopes[0].groups,
        rev,
        restarts_out,
        now,
        observed.refused,
        routing_problem,
        unplaced_problem,
        warnings,
        roles={s.role: (s.layout, s.groups) for s in scopes if s.role is not None and s.layout is not None},
    )
    _report_transitions(obj, result.status, routing_problem, result)
    if result.writes_children:
        result.later(REQUEUE_AFTER_WRITE_SECONDS)
    return result


def may_roll_out(
    role: str | None, replicas: Mapping[str | None, Mapping[int, ObservedReplica]], rev: str
) -> bool:
    """Whether ``role``'s ready replicas of an older revision may be taken out of service for ``rev`` this pass.

    Decode goes first: a prefill replica of an older revision stays in service while any decode replica of an
    older revision still serves (its leader Ready and not yet deleted, draining included: draining is the
    time its in-flight requests finish, and each of those may still be reading KV from its prefill peer).
    Once the old decode replicas are gone the prefill ones roll. Decode and a colocated fleet always may
    (within their budget); ``replicas`` is every role's observed replicas, by role.
    """
    if role != names.PD_PREFILL:
        return True
    return not any(_serves_older(group, rev) for group in replicas.get(names.PD_DECODE, {}).values())


def _serves_older(group: ObservedReplica, rev: str) -> bool:
    leader = group.leader
    return not group.at_revision(rev) and leader is not None and leader.ready and not leader.deleting


@dataclass
class RoleScope:
    """The replicas of one role (None: a colocated fleet) as this pass found and planned them.

    ``layout`` is None for a role the spec does not have: every replica of it is surplus.
    """

    role: str | None
    layout: Layout | None
    groups: dict[int, ObservedReplica]
    restarts: list[dict] = field(default_factory=list)
    unplaced: list = field(default_factory=list)

    @property
    def wanted(self) -> int:
        return self.layout.data if self.layout else 0

    @property
    def pods_per_replica(self) -> int:
        return self.layout.pods_per_replica if self.layout else 1


def _plan_replicas(
    obj: AscendInference,
    owner: Owner,
    scope: RoleScope,
    restarts: dict,
    rev: str,
    observed: Observed,
    now: float,
    settings: ReconcileSettings,
    result: PassPlan,
    rolls: bool = True,
) -> None:
    """One role's replicas: create, restart, drain, roll out within its budget (not at all this pass unless
    ``rolls``), and collect what is gone."""
    spec, groups, role = obj.spec, scope.groups, scope.role
    ppr, wanted = scope.pods_per_replica, scope.wanted

    # Replicas on a dead node leave the Service and go now (nodeloss.py); they are made again next pass.
    lost = fail_over_lost(groups, observed.dead_nodes, result)

    for surplus in groups.values():
        if surplus.index >= wanted:
            _drain_then_delete(surplus, "scale-in", spec.disruption.drain_seconds, now, result)

    out_of_service = sum(1 for i in range(wanted) if i not in groups or not groups[i].ready(ppr))
    budget = spec.disruption.max_unavailable - out_of_service
    outdated: list[ObservedReplica] = []
    for index in range(wanted):
        group = groups.get(index)
        if index in lost:
            result.later(REQUEUE_AFTER_WRITE_SECONDS)  # its pods are being deleted: the names are taken
        elif group is None or not group.pods:
            assert scope.layout is not None  # wanted > 0
            _create_replica(
                obj, scope.layout, owner, index, rev, restarts, observed, now, settings, result, role
            )
        elif any(p.deleting for p in group.pods):
            # Wait for the old gang to be gone before its names are reused.
            result.later(REQUEUE_AFTER_WRITE_SECONDS)
        elif group.failed or not group.complete(ppr):
            _restart_gang(group, restarts, now, settings, result)
        elif group.draining:
            _drain_then_delete(
                group, group.drain_reason or "restart", spec.disruption.drain_seconds, now, result
            )
        elif not group.at_revision(rev):
            if group.ready(ppr):
                outdated.append(group)
            else:  # not serving anyway: replacing it costs no availability
                _delete_group(
                    group,
                    result,
                    Event(
                        "Normal",
                        "RolloutReplace",
                        f"{group.label}: replacing not-ready pods with revision {rev}",
                    ),
                )
        elif not _release_hoarding_gang(obj, group, restarts, now, settings, result):
            _forget_stable_restarts(group, ppr, restarts, now, settings)
            _restore_serving(group, result)

    _roll_out(outdated, budget if rolls else 0, rev, spec.disruption.drain_seconds, now, result)
    _collect_pod_groups(obj, groups, result)
    scope.unplaced = _unplaced(groups, wanted, ppr, now, settings, result)
    scope.restarts = list(restarts.values())


def _unplaced(
    groups: dict[int, ObservedReplica],
    wanted: int,
    ppr: int,
    now: float,
    settings: ReconcileSettings,
    result: PassPlan,
) -> list:
    """The wanted replicas that are not ready and cannot be placed; looks again when a silent pod's grace ends."""
    found = []
    answering = answering_schedulers(groups.values())
    for index in range(wanted):
        group = groups.get(index)
        if group is None or group.ready(ppr):
            continue
        if (item := unplaced(group, now, settings, answering)) is not None:
            found.append(item)
        if (wait := next_placement_look(group, now, settings)) is not None:
            result.later(wait)
    return found


def _report_transitions(
    obj: AscendInference, status: dict | None, routing_problem: str | None, result: PassPlan
) -> None:
    """A Warning Event when Ready turns to a problem the user must act on (once per distinct sentence)."""
    before = get_condition(stored_status(obj).get("conditions", []), "Ready") or {}
    if routing_problem:
        if before.get("reason") != ROUTING_UNAVAILABLE:
            result.events.append(Event("Warning", ROUTING_UNAVAILABLE, routing_problem, with_status=True))
        return
    after = get_condition((status or {}).get("conditions", []), "Ready") or {}
    reason, message = after.get("reason"), after.get("message", "")
    if reason in (REASON_UNSCHEDULABLE, REASON_NO_SCHEDULER) and (
        before.get("reason"),
        before.get("message"),
    ) != (
        reason,
        message,
    ):
        # The readiness count before the first ";" is not news; the scheduler's sentence after it is.
        result.events.append(Event("Warning", reason, message.partition("; ")[2], with_status=True))


def _roll_out(
    outdated: list[ObservedReplica], budget: int, rev: str, drain_seconds: int, now: float, result: PassPlan
) -> None:
    """Drain the highest outdated ready replicas, as many as ``maxUnavailable`` leaves room for."""
    for group in sorted(outdated, key=lambda g: g.index, reverse=True)[: max(budget, 0)]:
        leader = group.leader
        assert leader is not None  # outdated groups are ready(): every rank is there, 0 included
        result.patches.append(Patch("Pod", leader.name, drain_patch(rfc3339_ms(now), "rollout")))
        result.events.append(
            Event(
                "Normal",
                "RolloutStep",
                f"{group.label}: draining for revision {rev} ({drain_seconds}s)",
            )
        )
        result.later(drain_seconds or REQUEUE_AFTER_WRITE_SECONDS)
    if outdated and budget <= 0:
        result.later(ROLLOUT_BLOCKED_SECONDS)


def _collect_pod_groups(obj: AscendInference, groups: dict[int, ObservedReplica], result: PassPlan) -> None:
    """A replica's Volcano PodGroup goes when its last pod goes, so it never holds queue resources alone;
    the next gang of that index creates it afresh (with the layout of its revision)."""
    if not uses_volcano(obj.spec):
        return
    deleting = {d.name for d in result.deletes if d.kind == "Pod"}
    for group in groups.values():
        alive = [p for p in group.pods if not p.deleting]
        if alive and all(p.name in deleting for p in alive):
            result.deletes.append(
                Delete(names.POD_GROUP_KIND, pod_group_name(obj.name, group.index, group.role))
            )


def _plan_services(
    obj: AscendInference,
    layout: Layout,
    owner: Owner,
    observed: Observed,
    now: float,
    settings: ReconcileSettings,
    result: PassPlan,
    network: NetworkPolicySettings | None = None,
) -> None:
    """The Services, the PDB and the NetworkPolicy: created when missing, patched back when they drift; the
    NetworkPolicy deleted when the operator's settings turn it off."""
    policy = network_policy(obj.spec, owner, network)
    desired = [
        *render_services(obj.spec, owner, layout),
        render_pdb(obj.spec, owner, layout),
        *([policy] if policy else []),
    ]
    have_policy = observed.network_policy
    if policy is None and have_policy is not None and not have_policy["metadata"].get("deletionTimestamp"):
        result.deletes.append(Delete("NetworkPolicy", have_policy["metadata"]["name"]))
        result.events.append(
            Event("Normal", "Deleted", f"deleted NetworkPolicy {have_policy['metadata']['name']}")
        )
    for want in desired:
        name = want["metadata"]["name"]
        have = {"PodDisruptionBudget": observed.pdb, "NetworkPolicy": have_policy}.get(
            want["kind"], observed.services.get(name)
        )
        if have is None:
            wait = observed.held_back(want["kind"], name, now, settings)
            if wait is not None:
                result.later(wait)
            else:  # announced by the applier, once the server has accepted it (creation_event)
                result.creates.append(want)
        elif drifted(want, have):
            body = {"metadata": {"labels": want["metadata"]["labels"]}, "spec": managed_spec(want, have)}
            result.patches.append(Patch(want["kind"], name, body))
            result.events.append(Event("Normal", "Updated", f"updated {want['kind']} {name}"))


def _create_replica(
    obj, layout, owner, index, rev, restarts, observed, now, settings, result, role=None
) -> None:
    record = restarts.get(index)
    if record:
        ready_at = (parse_rfc3339(record["lastTime"]) or now) + backoff_delay(record["count"], settings)
        if ready_at > now:
            result.later(ready_at - now)
            return
    pods = [
        avoid_nodes(p, observed.dead_nodes)
        for p in render_replica(obj.spec, owner, index, None if role else layout, rev, role)
    ]
    # A gang is created whole or not at all: one refused rank holds the replica back.
    waits = [
        w for p in pods if (w := observed.held_back("Pod", p["metadata"]["name"], now, settings)) is not None
    ]
    if waits:
        result.later(max(waits))
        return
    result.creates.extend(pods)


def creation_event(created: list[dict]) -> Event | None:
    """One Event for everything a pass created (the server accepted), e.g.
    ``created replicas 0, 1 (1 pod each, revision 5d8f); Service a, Service a-pods, PodDisruptionBudget a``.

    One Event per pass rather than one per child: a new object's first pass creates all its children.
    """
    if not created:
        return None
    replicas: dict[tuple[str, int], int] = {}
    revisions: set[str] = set()
    others: list[str] = []
    for obj in created:
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] == "Pod" and names.LABEL_REPLICA in labels:
            key = (labels.get(names.LABEL_PD_ROLE, ""), int(labels[names.LABEL_REPLICA]))
            replicas[key] = replicas.get(key, 0) + 1
            revisions.add(labels.get(names.LABEL_REVISION, ""))
        else:
            others.append(f"{obj['kind']} {obj['metadata']['name']}")
    parts = []
    if replicas:
        counts = set(replicas.values())
        each = counts.pop() if len(counts) == 1 else None
        pods = (
            f"{each} pod{'s' if each != 1 else ''}" + (" each" if len(replicas) > 1 else "")
            if each
            else "pods"
        )
        plural = "s" if len(replicas) > 1 else ""
        parts.append(
            f"replica{plural} {', '.join(f'{role} {i}'.lstrip() for role, i in sorted(replicas))} ({pods}, revision "
            f"{', '.join(sorted(revisions))})"
        )
    if others:
        parts.append(", ".join(others))
    return Event("Normal", "CreatedReplica" if replicas else "Created", "created " + "; ".join(parts))


def _count_restart(
    group: ObservedReplica, restarts: dict, now: float, settings: ReconcileSettings
) -> tuple[int, float]:
    """Record one more restart of the replica; its count and the backoff before it is recreated."""
    previous = restarts.get(group.index)
    count = (previous["count"] if previous else 0) + 1
    restarts[group.index] = {"replica": group.index, "count": count, "lastTime": rfc3339_ms(now)}
    if group.role:
        restarts[group.index]["role"] = group.role
    return count, backoff_delay(count, settings)


def _release_hoarding_gang(
    obj: AscendInference,
    group: ObservedReplica,
    restarts: dict,
    now: float,
    settings: ReconcileSettings,
    result: PassPlan,
) -> bool:
    """Delete a gang whose placed pods have held their NPUs for the others longer than the gang timeout."""
    due, wait = gang_release_due(group, now, settings, uses_volcano(obj.spec))
    if wait is not None:
        result.later(wait)
    if not due:
        return False
    sentence = release_sentence(group, settings.gang_timeout)
    count, delay = _count_restart(group, restarts, now, settings)
    _delete_group(
        group,
        result,
        Event(
            "Warning",
            REASON_GANG_RELEASED,
            sentence + (f"; recreating in {delay:g}s (restart {count})" if delay else "; recreating"),
        ),
    )
    result.later(max(delay, REQUEUE_AFTER_WRITE_SECONDS))
    return True


def _restart_gang(
    group: ObservedReplica, restarts: dict, now: float, settings: ReconcileSettings, result: PassPlan
) -> None:
    count, delay = _count_restart(group, restarts, now, settings)
    failed = [p.name for p in group.pods if p.failed] or ["a missing rank"]
    _delete_group(
        group,
        result,
        Event(
            "Warning",
            "ReplicaRestart",
            f"{group.label}: {', '.join(failed)} failed; recreating the whole gang"
            + (f" in {delay:g}s (restart {count})" if delay else ""),
        ),
    )
    result.later(max(delay, REQUEUE_AFTER_WRITE_SECONDS))


def _drain_then_delete(
    group: ObservedReplica, reason: str, drain_seconds: int, now: float, result: PassPlan
) -> None:
    leader = group.leader
    if leader is None or drain_seconds == 0 or not leader.ready:
        # Nothing is serving from this replica, so there is nothing to drain.
        _delete_group(group, result, Event("Normal", "DeletedReplica", f"{group.label}: deleted ({reason})"))
        return
    if leader.drain_started is None:
        result.patches.append(Patch("Pod", leader.name, drain_patch(rfc3339_ms(now), reason)))
        result.events.append(
            Event(
                "Normal",
                "Draining",
                f"{group.label}: left the Service, deleting in {drain_seconds}s ({reason})",
            )
        )
        result.later(drain_seconds)
        return
    remaining = leader.drain_started + drain_seconds - now
    if remaining > 0:
        result.later(remaining)
        return
    _delete_group(
        group,
        result,
        Event("Normal", "DeletedReplica", f"{group.label}: drained and deleted ({reason})"),
    )


def _delete_group(group: ObservedReplica, result: PassPlan, event: Event) -> None:
    result.deletes.extend(Delete("Pod", p.name) for p in group.pods if not p.deleting)
    result.events.append(event)


def _forget_stable_restarts(group, ppr, restarts, now, settings) -> None:
    """A replica that served well for the longest backoff starts its backoff afresh."""
    record = restarts.get(group.index)
    if record and group.ready(ppr):
        last = parse_rfc3339(record["lastTime"]) or now
        if now - last >= settings.backoff_max:
            del restarts[group.index]


def _restore_serving(group: ObservedReplica, result: PassPlan) -> None:
    leader = group.leader
    if leader is not None and not leader.serving and leader.drain_started is None:
        result.patches.append(
            Patch("Pod", leader.name, {"metadata": {"labels": {names.LABEL_SERVING: "true"}}})
        )


# An invalid spec's pass derives only these; the rest of the stored status stays as it was.
INVALID_SPEC_FIELDS = frozenset({"conditions", "observed_generation"})


def plan_invalid(obj: dict, problems: list[str], now: float, reason: str = "InvalidSpec") -> PassPlan:
    """An invalid spec: say what is wrong in Ready=False and touch no children."""
    result = PassPlan()
    previous = dict(obj.get("status") or {})
    message = "; ".join(problems)
    generation = (obj.get("metadata") or {}).get("generation")
    conditions = previous.get("conditions", [])
    before = get_condition(conditions, "Ready")
    conditions = set_condition(conditions, "Ready", False, reason, message, now, generation)
    if not before or before.get("reason") != reason or before.get("message") != message:
        result.events.append(Event("Warning", reason, message, with_status=True))
    try:
        stored = AscendInferenceStatus.model_validate(previous)
    except ValueError:  # the stored status itself is unreadable: keep only what this pass knows
        stored = AscendInferenceStatus()
    if generation is None:
        generation = stored.observed_generation
    status = AscendInferenceStatus(
        **kept_fields(stored, INVALID_SPEC_FIELDS),
        conditions=[Condition.model_validate(c) for c in conditions],
        observed_generation=generation,
    )
    result.status = wire_status(status)
    return result
