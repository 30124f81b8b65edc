"""What the control loop reads from the API, as the plain values :mod:`.evaluate` takes (pure).

Also the other direction: the ``status.actions`` list after new decisions, bounded but never
forgetting an action whose cooldown is still running (the cooldown would be lost with it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from ..api.actions import action_kind
from ..api.availability import TOPOLOGY_KEYS
from ..api.disaggregation import ROLES, role_instance_cap
from ..api.times import parse_rfc3339, rfc3339
from ..api.v1alpha1 import ActionRecord, AscendInference, Autoscaling
from ..api.variants import fleet_weights
from ..layout import plan_roles
from ..observed import ObservedReplica, observed_replicas, pod_condition
from ..render import Valid
from .actions import FLEET, action_for, decision_result
from .model import ControlDecision, FleetState, PastAction, ReplicaInfo, RoleState
from .npu_health import placement


def fleet_state(valid: Valid, pods: Iterable[dict]) -> FleetState:
    """The control loop's view of one validated AscendInference and its engine pods."""
    return with_pods(object_state(valid), valid.layout.pods_per_replica, pods)


def object_state(valid: Valid) -> FleetState:
    """What the control loop reads from the object alone (no replicas yet): the part that depends on
    nothing but the object's own content, so one resourceVersion always gives the same answer."""
    obj = valid.obj
    rules = obj.spec.rules_in_force()
    split = obj.spec.disaggregation
    return FleetState(
        namespace=obj.namespace,
        name=obj.name,
        replicas=obj.spec.parallelism.data,
        rules=tuple(rules),
        builtin=len(rules) - len(obj.spec.rules),
        autoscaling=obj.spec.autoscaling,
        max_unavailable=obj.spec.disruption.max_unavailable,
        actions=past_actions(obj),
        availability=obj.spec.availability,
        traffic=fleet_weights(obj.spec, obj.metadata),
        roles=role_states(obj),
        ratio=split.ratio if split is not None else None,
    )


def role_states(obj: AscendInference) -> dict[str, RoleState]:
    """Each role of a two-role fleet, without its replicas yet (empty for a fleet of one role)."""
    split = obj.spec.disaggregation
    if split is None:
        return {}
    layouts = plan_roles(obj.spec)
    states: dict[str, RoleState] = {}
    for role in ROLES:
        spec, bounds = split.role(role), split.role(role).bounds()
        cap = role_instance_cap(obj.spec.engine.type, role)
        limit = None
        most = bounds.max_replicas
        if cap is not None and cap[0] < most:
            most, limit = cap[0], f": {cap[1]}"
        states[role] = RoleState(
            replicas=spec.parallelism.data,
            min_replicas=bounds.min_replicas,
            max_replicas=most,
            pods_per_replica=layouts[role].pods_per_replica,
            limit=limit,
        )
    return states


def with_pods(state: FleetState, pods_per_replica: int, pods: Iterable[dict]) -> FleetState:
    """An object's state (:func:`object_state`) with its replicas as its engine pods show them (each role's
    from the pods of that role, on a two-role fleet)."""
    pods = list(pods)
    if state.roles:
        roles = {
            role: dataclasses.replace(
                info, replica_states=_replicas(state, info.pods_per_replica, pods, role)
            )
            for role, info in state.roles.items()
        }
        return dataclasses.replace(state, roles=roles)
    return dataclasses.replace(state, replica_states=_replicas(state, pods_per_replica, pods, None))


def _replicas(
    state: FleetState, pods_per_replica: int, pods: list[dict], role: str | None
) -> dict[int, ReplicaInfo]:
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    return {
        index: ReplicaInfo(
            index=index,
            ready=group.ready(pods_per_replica),
            draining=group.draining,
            serving_since=_serving_since(group, by_name),
            leader=group.leader.name if group.leader else None,
            domain=_domain(state, by_name.get(group.leader.name) if group.leader else None),
            placement=placement(by_name.get(member.name) or {} for member in group.pods),
        )
        for index, group in observed_replicas(pods, role).items()
    }


def _domain(state: FleetState, leader: dict | None) -> str | None:
    """The failure domain of a replica's leader pod, as spec.availability counts them (None: not known).

    A node is the pod's ``spec.nodeName``. A zone is read from the pod's own ``topology.kubernetes.io/zone``
    label, which the API server's PodTopologyLabels admission plugin copies from the node at binding (feature
    gate PodTopologyLabelsAdmission, beta in Kubernetes 1.35); the operator reads no Node objects.
    """
    if state.availability is None or leader is None:
        return None
    if state.availability.spread == "node":
        return (leader.get("spec") or {}).get("nodeName") or None
    labels = (leader.get("metadata") or {}).get("labels") or {}
    return labels.get(TOPOLOGY_KEYS["zone"]) or None


def _serving_since(group: ObservedReplica, pods: Mapping[str | None, dict]) -> float | None:
    """When the replica's last pod became Ready (its metrics start then), else when it started."""
    times = []
    for state in group.pods:
        pod = pods.get(state.name, {})
        status = pod.get("status") or {}
        ready = pod_condition(pod, "Ready")
        when = parse_rfc3339((ready or {}).get("lastTransitionTime")) or parse_rfc3339(
            status.get("startTime")
        )
        if when is None:
            return None
        times.append(when)
    return max(times, default=None)


def past_actions(obj: AscendInference) -> tuple[PastAction, ...]:
    """The recorded decisions, newest first, with unreadable times left out."""
    if obj.status is None:
        return ()
    result = []
    for record in obj.status.actions:
        when = parse_rfc3339(record.time)
        if when is not None:
            result.append(PastAction(when, record.rule, record.action, record.target, record.dry_run))
    return tuple(sorted(result, key=lambda a: a.time, reverse=True))


def action_record(decision: ControlDecision, now: float) -> dict:
    """The status.actions entry for a decision, in wire form (through the status model)."""
    return ActionRecord(
        time=rfc3339(now),
        rule=decision.rule,
        metric=decision.metric,
        value=None if decision.value is None else round(decision.value, 6),
        action=decision.action,
        target=decision.target,
        result=decision_result(decision),
        dry_run=decision.dry_run,
    ).wire()


def updated_actions(
    records: list[dict], new: list[dict], limit: int, autoscaling: Autoscaling, now: float
) -> list[dict]:
    """``new`` (newest first) ahead of ``records``, cut to ``limit`` entries.

    An older entry past the limit is kept while it is the newest of its kind and its cooldown still
    runs: cooldowns are read back from this list, and dropping it would allow the action again early.
    """
    merged = [*new, *records]
    kept, seen = merged[:limit], {_key(r) for r in merged[:limit]}
    for record in merged[limit:]:
        key = _key(record)
        if key in seen:
            continue
        seen.add(key)
        when = parse_rfc3339(record.get("time"))
        if when is not None and now - when < _cooldown(record, autoscaling):
            kept.append(record)
    return kept


def _key(record: dict) -> tuple:
    return (
        record.get("action"),
        record.get("target"),
        bool(record.get("dryRun")),
        (record.get("rule") if action_for(str(record.get("action"))).paced_per_rule else None),
    )


def _cooldown(record: dict, autoscaling: Autoscaling) -> float:
    # No cooldown (notify): its spacing is one window, and a dropped notify repeats at worst once early.
    cooldowns = action_kind(str(record.get("action"))).cooldowns
    return max((float(getattr(autoscaling, name)) for name in cooldowns), default=0.0)


__all__ = [
    "FLEET",
    "action_record",
    "fleet_state",
    "object_state",
    "past_actions",
    "updated_actions",
    "with_pods",
]
