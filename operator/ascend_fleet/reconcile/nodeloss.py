"""A replica on a dead node: out of the Service at once, and made again on another node without waiting.

Kubernetes alone takes a dead node's pods out of a Service only once the node lifecycle controller marks the
node unreachable (``--node-monitor-grace-period``, 50 s), and never finishes deleting them: the taint manager
evicts them, but no kubelet confirms, until an administrator taints the node ``out-of-service``. The operator
reads the node Leases itself (:mod:`.nodeleases`); once a node's Lease is stale, each replica with a pod there
is lost:

- its leader's serving label turns ``false`` (the serving Service and the InferencePool select on it, so the
  endpoints drop it within the EndpointSlice controller's reaction, seconds);
- its pods on the dead node are deleted with no grace period (a force delete: the kubelet's confirmation
  never comes), its pods elsewhere deleted as any gang restart deletes them;
- once they are gone, the planner creates the replica again under the same names, kept off every dead node.

Only the pods this object owns are touched (the observed pods are filtered by controller ownerReference).
Why a force delete is safe here: an engine pod has no identity that needs at most one copy (no volume it
writes, no lock; its name only gives its gang a DNS name, which follows the new pods), so an engine still
running on a node that is cut off but alive does no harm: it is in no endpoint, and its kubelet stops it on
coming back, finding the pod gone.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping

from ..api import names
from ..observed import ObservedReplica
from .timing import NODE_LEASE_STALE_SECONDS
from .writes import Delete, Event, PassPlan, Patch

REASON_NODE_LOST = "NodeLost"


def lost_replicas(groups: Mapping[int, ObservedReplica], dead_nodes: Collection[str]) -> dict[int, list[str]]:
    """The replicas with a pod on a dead node, with those nodes (sorted)."""
    lost = {}
    for index, group in groups.items():
        nodes = sorted({p.node_name for p in group.pods if p.node_name and p.node_name in dead_nodes})
        if nodes:
            lost[index] = nodes
    return lost


def fail_over_lost(
    groups: dict[int, ObservedReplica], dead_nodes: Collection[str], result: PassPlan
) -> set[int]:
    """Fail over every lost replica and take it out of ``groups``; their indexes."""
    lost = lost_replicas(groups, dead_nodes)
    for index, nodes in lost.items():
        fail_over(groups.pop(index), nodes, dead_nodes, result)
    return set(lost)


def fail_over(
    group: ObservedReplica, nodes: list[str], dead_nodes: Collection[str], result: PassPlan
) -> None:
    """Take a lost replica out of the Service and delete its pods (force on the dead nodes)."""
    leader = group.leader
    if leader is not None and leader.serving and not leader.deleting:
        result.patches.append(
            Patch("Pod", leader.name, {"metadata": {"labels": {names.LABEL_SERVING: "false"}}})
        )
    for pod in group.pods:
        if pod.node_name in dead_nodes:
            result.deletes.append(Delete("Pod", pod.name, force=True))
        elif not pod.deleting:
            result.deletes.append(Delete("Pod", pod.name))
    result.events.append(
        Event(
            "Warning",
            REASON_NODE_LOST,
            f"replica {group.index}: node {', '.join(nodes)} has not renewed its Lease for "
            f"{NODE_LEASE_STALE_SECONDS:g}s; out of the Service, recreating on another node",
        )
    )


def avoid_nodes(pod: dict, nodes: Collection[str]) -> dict:
    """``pod`` kept off ``nodes`` by name: a ``metadata.name NotIn`` field in every term of its required node
    affinity (terms are ORed, so each needs it). The scheduler would otherwise place the replica back on a dead
    node until the node lifecycle controller taints it unreachable."""
    if not nodes or pod.get("kind") != "Pod":
        return pod
    pod = copy.deepcopy(pod)
    affinity = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term.setdefault("matchFields", []).append(
            {"key": "metadata.name", "operator": "NotIn", "values": sorted(nodes)}
        )
    return pod
