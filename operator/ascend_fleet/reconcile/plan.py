"""The reconciler's decisions, as a pure function of spec, observed children and the clock.

Level-based: every pass compares what the spec asks for with what exists and returns the
writes that close the gap (and nothing when there is no gap). Semantics follow LeaderWorkerSet:
a replica is a gang (any failed or missing rank recreates the whole replica, with a per-replica
backoff); template changes roll out replica by replica within ``disruption.maxUnavailable``;
scale-in, rollouts and rule restarts all drain first (leader leaves the Service, in-flight
requests get ``drainSeconds``) and only then delete.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api import names
from ..api.settings import ReconcileSettings
from ..api.times import parse_rfc3339, rfc3339_ms
from ..api.v1alpha1 import AscendInference, AscendInferenceStatus
from ..layout import Layout
from ..render import (
    Owner,
    drain_patch,
    leader_selector,
    pod_group_name,
    render_pdb,
    render_replica,
    render_services,
    revision,
    uses_volcano,
)
from ..render.routing import PickerSettings, picker_name, render_routing
from ..status import ReplicaState, replica_states, set_condition
from ..status.conditions import get_condition
from .refusals import NAME_CONFLICT, Refusal

# After a pass that wrote something, look again soon: the watch will have caught up by then.
SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class Patch:
    kind: str
    name: str
    body: dict


@dataclass(frozen=True)
class Delete:
    kind: str
    name: str


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str
    # Reports a status transition (not a child write): recorded only once that status is stored,
    # so a pass whose status write loses a conflict does not report it twice.
    with_status: bool = False


@dataclass
class Observed:
    """Children that carry this object's ownerReference (the caller filters by uid)."""

    pods: list[dict] = field(default_factory=list)
    services: dict[str, dict] = field(default_factory=dict)
    pdb: dict | None = None
    # Children whose create the API server refused, by (kind, name): retried with backoff, reported in Ready.
    refused: dict[tuple[str, str], Refusal] = field(default_factory=dict)
    # Owned routing objects by (kind, name), listed this pass (see observe.observe_routing); the picker's
    # Service is in ``services``. Empty when nothing was listed (mode service without leftovers).
    routing: dict[tuple[str, str], dict] = field(default_factory=dict)
    # Routing kinds whose API the server does not serve this pass (their CRD is not installed).
    routing_missing: frozenset[str] = frozenset()

    def held_back(self, kind: str, name: str, now: float, settings: ReconcileSettings) -> float | None:
        """Seconds until a refused child may be tried again (None: it may be created now)."""
        refusal = self.refused.get((kind, name))
        if refusal is None:
            return None
        wait = refusal.retry_at(settings.backoff_initial, settings.backoff_max) - now
        return wait if wait > 0 else None


@dataclass
class Plan:
    """Writes for one pass, in the order the applier performs them."""

    creates: list[dict] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    status: dict = field(default_factory=dict)
    requeue_after: float | None = None

    def later(self, seconds: float) -> None:
        """Ask for another pass within ``seconds``."""
        seconds = max(seconds, 0.1)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    @property
    def writes_children(self) -> bool:
        return bool(self.creates or self.patches or self.deletes)


def backoff_delay(count: int, settings: ReconcileSettings) -> float:
    """Delay before recreating a replica after its ``count``-th failure: 0, then initial doubling to max."""
    if count <= 1:
        return 0.0
    return min(settings.backoff_initial * 2 ** (count - 2), settings.backoff_max)


def plan(
    obj: AscendInference,
    layout: Layout,
    observed: Observed,
    now: float,
    settings: ReconcileSettings,
    picker: PickerSettings | None = None,
    routing_enabled: bool = True,
) -> Plan:
    """Everything this pass should write for a valid AscendInference (routing only if ``routing_enabled``)."""
    result = Plan()
    owner = Owner.of(obj)
    spec = obj.spec
    rev = revision(spec, owner.name, layout)
    _plan_services(obj, layout, owner, observed, now, settings, result)
    routing_problem = _plan_routing(obj, owner, observed, now, settings, picker, result, routing_enabled)
    groups = replica_states(observed.pods)
    restarts = {r["replica"]: r for r in stored_status(obj).get("groupRestarts", [])}
    ppr, wanted = layout.pods_per_replica, layout.data

    for surplus in groups.values():
        if surplus.index >= wanted:
            _drain_then_delete(surplus, "scale-in", spec.disruption.drain_seconds, now, result)

    out_of_service = sum(1 for i in range(wanted) if i not in groups or not groups[i].ready(ppr))
    budget = spec.disruption.max_unavailable - out_of_service
    outdated: list[ReplicaState] = []
    for index in range(wanted):
        group = groups.get(index)
        if group is None or not group.pods:
            _create_replica(obj, layout, owner, index, rev, restarts, observed, now, settings, result)
        elif any(p.deleting for p in group.pods):
            result.later(SETTLE_SECONDS)  # wait for the old gang to be gone before its names are reused
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
                        f"replica {index}: replacing not-ready pods with revision {rev}",
                    ),
                )
        else:
            _forget_stable_restarts(group, ppr, restarts, now, settings)
            _restore_serving(group, result)

    for group in sorted(outdated, key=lambda g: g.index, reverse=True)[: max(budget, 0)]:
        leader = group.leader
        assert leader is not None  # outdated groups are ready(): every rank is there, 0 included
        result.patches.append(Patch("Pod", leader.name, drain_patch(rfc3339_ms(now), "rollout")))
        result.events.append(
            Event(
                "Normal",
                "RolloutStep",
                f"replica {group.index}: draining for revision {rev} ({spec.disruption.drain_seconds}s)",
            )
        )
        result.later(spec.disruption.drain_seconds or SETTLE_SECONDS)
    if outdated and budget <= 0:
        result.later(SETTLE_SECONDS * 5)

    _collect_pod_groups(obj, groups, result)
    result.status = derive_status(
        obj, layout, groups, rev, list(restarts.values()), now, observed.refused, routing_problem
    )
    if routing_problem:
        before = get_condition(stored_status(obj).get("conditions", []), "Ready") or {}
        if before.get("reason") != ROUTING_UNAVAILABLE:
            result.events.append(Event("Warning", ROUTING_UNAVAILABLE, routing_problem, with_status=True))
    if result.writes_children:
        result.later(SETTLE_SECONDS)
    return result


def _collect_pod_groups(obj: AscendInference, groups: dict[int, ReplicaState], result: Plan) -> None:
    """A replica's Volcano PodGroup goes when its last pod goes, so it never holds queue resources alone;
    the next gang of that index creates it afresh (with the layout of its revision)."""
    if not uses_volcano(obj.spec):
        return
    deleting = {d.name for d in result.deletes if d.kind == "Pod"}
    for group in groups.values():
        alive = [p for p in group.pods if not p.deleting]
        if alive and all(p.name in deleting for p in alive):
            result.deletes.append(Delete(names.POD_GROUP_KIND, pod_group_name(obj.name, group.index)))


def _plan_services(
    obj: AscendInference,
    layout: Layout,
    owner: Owner,
    observed: Observed,
    now: float,
    settings: ReconcileSettings,
    result: Plan,
) -> None:
    desired = [*render_services(obj.spec, owner, layout), render_pdb(obj.spec, owner, layout)]
    for want in desired:
        name = want["metadata"]["name"]
        have = observed.pdb if want["kind"] == "PodDisruptionBudget" else observed.services.get(name)
        if have is None:
            wait = observed.held_back(want["kind"], name, now, settings)
            if wait is not None:
                result.later(wait)
            else:  # announced by the applier, once the server has accepted it (creation_event)
                result.creates.append(want)
        elif _drifted(want, have):
            body = {"metadata": {"labels": want["metadata"]["labels"]}, "spec": _managed_spec(want, have)}
            result.patches.append(Patch(want["kind"], name, body))
            result.events.append(Event("Normal", "Updated", f"updated {want['kind']} {name}"))


ROUTING_UNAVAILABLE = "RoutingUnavailable"
# The CRD each routing kind comes from, and what installs it (the sentence in Ready=False/RoutingUnavailable).
ROUTING_CRDS = {
    "InferencePool": (
        "inferencepools.inference.networking.k8s.io",
        "the chart's inferenceExtension.installCRDs=true installs it",
    ),
    "InferenceObjective": (
        "inferenceobjectives.inference.networking.x-k8s.io",
        "the chart's inferenceExtension.installCRDs=true installs it",
    ),
    "HTTPRoute": ("httproutes.gateway.networking.k8s.io", "install the Gateway API standard CRDs"),
}
# Delete order: the CRD kinds first and the picker's Service last. The picker's Service is in the watch cache
# and tells a fleet in mode service that routing objects may be left to collect (see observe_routing), so it
# is the first routing object created and the last one deleted.
ROUTING_DELETE_ORDER = (
    "HTTPRoute",
    "InferenceObjective",
    "InferencePool",
    "Deployment",
    "ConfigMap",
    "RoleBinding",
    "Role",
    "ServiceAccount",
    "Service",
)
# What the operator owns in each routing kind (the rest is the API server's defaults or other writers').
_ROUTING_OWNED = {
    "InferencePool": ("spec",),
    "InferenceObjective": ("spec",),
    "HTTPRoute": ("spec",),
    "Deployment": ("spec",),
    "ConfigMap": ("data",),
    "ServiceAccount": (),
    "Role": ("rules",),
    "RoleBinding": ("subjects",),
}


def _routing_off(obj: AscendInference) -> str | None:
    """The Ready sentence for a fleet asking for routing from an operator installed without it."""
    if obj.spec.routing.mode != "inferencePool":
        return None
    return (
        "spec.routing.mode inferencePool is off in this installation: the operator runs with routing.enabled: "
        "false (the chart's rbac.routing: false) and holds no permissions for routing objects; use mode service, "
        "or reinstall with rbac.routing: true"
    )


def _plan_routing(
    obj: AscendInference,
    owner: Owner,
    observed: Observed,
    now: float,
    settings: ReconcileSettings,
    picker: PickerSettings | None,
    result: Plan,
    enabled: bool = True,
) -> str | None:
    """Create, patch back and collect the routing objects of ``spec.routing``; the Ready sentence if it cannot.

    Not ``enabled`` (the operator holds no routing permissions): nothing of routing is read or written.

    With a CRD of a needed kind missing, nothing of routing is created or deleted (the engines still are):
    the cluster needs that CRD first, and Ready says which.
    """
    if not enabled:
        return _routing_off(obj)
    desired = render_routing(obj.spec, owner, picker)
    needed = {o["kind"] for o in desired} & set(ROUTING_CRDS)
    missing = sorted(needed & observed.routing_missing)
    if missing:
        crds = "; ".join(f"{ROUTING_CRDS[k][0]} ({ROUTING_CRDS[k][1]})" for k in missing)
        return f"spec.routing.mode inferencePool needs CRDs the cluster does not serve: {crds}"
    service_name = picker_name(owner.name)
    have_service = observed.services.get(service_name)
    wanted: set[tuple[str, str]] = set()
    # The picker's Service first; everything else once the cache shows it (see ROUTING_DELETE_ORDER).
    ordered = sorted(
        desired, key=lambda o: not (o["kind"] == "Service" and o["metadata"]["name"] == service_name)
    )
    for want in ordered:
        kind, name = want["kind"], want["metadata"]["name"]
        wanted.add((kind, name))
        is_service = kind == "Service"
        have = have_service if is_service else observed.routing.get((kind, name))
        if have is None:
            if not is_service and have_service is None:
                continue
            wait = observed.held_back(kind, name, now, settings)
            if wait is not None:
                result.later(wait)
            else:
                result.creates.append(want)
        elif (have.get("metadata") or {}).get("deletionTimestamp"):
            result.later(SETTLE_SECONDS)  # a collected one still going: recreate it once it is gone
        elif is_service and _drifted(want, have):
            body = {"metadata": {"labels": want["metadata"]["labels"]}, "spec": _managed_spec(want, have)}
            result.patches.append(Patch(kind, name, body))
            result.events.append(Event("Normal", "Updated", f"updated {kind} {name}"))
        elif not is_service and _routing_drifted(want, have):
            result.patches.append(Patch(kind, name, _routing_patch(want)))
            result.events.append(Event("Normal", "Updated", f"updated {kind} {name}"))
    leftovers = [
        (k, n) for (k, n), o in observed.routing.items() if (k, n) not in wanted and not _deleting(o)
    ]
    if have_service is not None and ("Service", service_name) not in wanted and not _deleting(have_service):
        leftovers.append(("Service", service_name))
    leftovers.sort(key=lambda kn: (ROUTING_DELETE_ORDER.index(kn[0]), kn[1]))
    if leftovers:
        result.deletes.extend(Delete(k, n) for k, n in leftovers)
        result.events.append(
            Event("Normal", "Deleted", "deleted " + ", ".join(f"{k} {n}" for k, n in leftovers))
        )
    return None


def _deleting(obj: dict) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _routing_drifted(want: dict, have: dict) -> bool:
    """Labels or an owned field differ; fields the API server defaulted inside ours do not count."""
    labels = (have.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in want["metadata"]["labels"].items()):
        return True
    return any(not _within(want.get(key), have.get(key)) for key in _ROUTING_OWNED[want["kind"]])


def _within(want, have) -> bool:
    """``want`` is contained in ``have``: equal scalars, dicts whose keys match, lists element by element."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_within(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(_within, want, have))
    return want == have


def _routing_patch(want: dict) -> dict:
    """A merge patch setting the labels and every owned field to the rendered ones."""
    body: dict = {"metadata": {"labels": want["metadata"]["labels"]}}
    for key in _ROUTING_OWNED[want["kind"]]:
        body[key] = want.get(key)
    spec = body.get("spec")
    if want["kind"] == "Deployment" and spec:
        # The picker's strategy is Recreate, which the API server refuses next to a stored rollingUpdate;
        # the selector is immutable (and always the rendered one).
        spec = {k: v for k, v in spec.items() if k != "selector"}
        spec["strategy"] = {**spec.get("strategy", {}), "rollingUpdate": None}
        body["spec"] = spec
    return body


# Spec fields the operator owns but never sets: a stored value (from an older operator: PDBs used to carry
# maxUnavailable, which the API server refuses next to minAvailable) is removed by the patch.
_CLEARED = {"PodDisruptionBudget": ("maxUnavailable",)}


def _managed_spec(obj: dict, have: dict | None = None) -> dict:
    """The spec fields the operator owns (the API server fills in others, e.g. clusterIP), as a merge patch."""
    keys = {
        "Service": ("selector", "ports", "type", "publishNotReadyAddresses"),
        "PodDisruptionBudget": ("minAvailable", "selector"),
    }[obj["kind"]]
    spec = {k: obj["spec"][k] for k in keys if k in obj["spec"]}
    have_spec = (have or {}).get("spec") or {}
    spec.update({k: None for k in _CLEARED.get(obj["kind"], ()) if have_spec.get(k) is not None})
    return spec


def _drifted(want: dict, have: dict) -> bool:
    labels = have.get("metadata", {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in want["metadata"]["labels"].items()):
        return True
    have_spec = have.get("spec") or {}
    return any(have_spec.get(k) != v for k, v in _managed_spec(want, have).items())


def _create_replica(obj, layout, owner, index, rev, restarts, observed, now, settings, result) -> None:
    record = restarts.get(index)
    if record:
        ready_at = (parse_rfc3339(record["lastTime"]) or now) + backoff_delay(record["count"], settings)
        if ready_at > now:
            result.later(ready_at - now)
            return
    pods = render_replica(obj.spec, owner, index, layout, rev)
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
    replicas: dict[int, int] = {}
    revisions: set[str] = set()
    others: list[str] = []
    for obj in created:
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] == "Pod" and names.LABEL_REPLICA in labels:
            index = int(labels[names.LABEL_REPLICA])
            replicas[index] = replicas.get(index, 0) + 1
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
            f"replica{plural} {', '.join(map(str, sorted(replicas)))} ({pods}, revision "
            f"{', '.join(sorted(revisions))})"
        )
    if others:
        parts.append(", ".join(others))
    return Event("Normal", "CreatedReplica" if replicas else "Created", "created " + "; ".join(parts))


def _restart_gang(
    group: ReplicaState, restarts: dict, now: float, settings: ReconcileSettings, result: Plan
) -> None:
    previous = restarts.get(group.index)
    count = (previous["count"] if previous else 0) + 1
    restarts[group.index] = {"replica": group.index, "count": count, "lastTime": rfc3339_ms(now)}
    delay = backoff_delay(count, settings)
    failed = [p.name for p in group.pods if p.failed] or ["a missing rank"]
    _delete_group(
        group,
        result,
        Event(
            "Warning",
            "ReplicaRestart",
            f"replica {group.index}: {', '.join(failed)} failed; recreating the whole gang"
            + (f" in {delay:g}s (restart {count})" if delay else ""),
        ),
    )
    result.later(max(delay, SETTLE_SECONDS))


def _drain_then_delete(
    group: ReplicaState, reason: str, drain_seconds: int, now: float, result: Plan
) -> None:
    leader = group.leader
    if leader is None or drain_seconds == 0 or not leader.ready:
        # Nothing is serving from this replica, so there is nothing to drain.
        _delete_group(
            group, result, Event("Normal", "DeletedReplica", f"replica {group.index}: deleted ({reason})")
        )
        return
    if leader.drain_started is None:
        result.patches.append(Patch("Pod", leader.name, drain_patch(rfc3339_ms(now), reason)))
        result.events.append(
            Event(
                "Normal",
                "Draining",
                f"replica {group.index}: left the Service, deleting in {drain_seconds}s ({reason})",
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
        Event("Normal", "DeletedReplica", f"replica {group.index}: drained and deleted ({reason})"),
    )


def _delete_group(group: ReplicaState, result: Plan, event: Event) -> None:
    result.deletes.extend(Delete("Pod", p.name) for p in group.pods if not p.deleting)
    result.events.append(event)


def _forget_stable_restarts(group, ppr, restarts, now, settings) -> None:
    """A replica that served well for the longest backoff starts its backoff afresh."""
    record = restarts.get(group.index)
    if record and group.ready(ppr):
        last = parse_rfc3339(record["lastTime"]) or now
        if now - last >= settings.backoff_max:
            del restarts[group.index]


def _restore_serving(group: ReplicaState, result: Plan) -> None:
    leader = group.leader
    if leader is not None and not leader.serving and leader.drain_started is None:
        result.patches.append(
            Patch("Pod", leader.name, {"metadata": {"labels": {names.LABEL_SERVING: "true"}}})
        )


def stored_status(obj: AscendInference) -> dict:
    """The status as stored (only the fields that were written), so comparing it with ours is exact."""
    if obj.status is None:
        return {}
    return obj.status.model_dump(by_alias=True, exclude_unset=True, mode="json")


def derive_status(
    obj: AscendInference,
    layout: Layout,
    groups: dict[int, ReplicaState],
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


def plan_invalid(obj: dict, problems: list[str], now: float) -> Plan:
    """An invalid spec: say what is wrong in Ready=False/InvalidSpec and touch no children."""
    result = Plan()
    previous = dict(obj.get("status") or {})
    message = "; ".join(problems)
    generation = (obj.get("metadata") or {}).get("generation")
    conditions = previous.get("conditions", [])
    before = get_condition(conditions, "Ready")
    conditions = set_condition(conditions, "Ready", False, "InvalidSpec", message, now, generation)
    if not before or before.get("reason") != "InvalidSpec" or before.get("message") != message:
        result.events.append(Event("Warning", "InvalidSpec", message, with_status=True))
    status = {**previous, "conditions": conditions}
    if generation is not None:
        status["observedGeneration"] = generation
    try:
        result.status = wire_status(AscendInferenceStatus.model_validate(status))
    except ValueError:  # the stored status itself is unreadable: keep only what this pass knows
        result.status = wire_status(
            AscendInferenceStatus.model_validate({"conditions": conditions, "observedGeneration": generation})
        )
    return result
