"""One node's death on the real control plane, timed as a dual-active fleet lives through it.

The node agent cuts a node's power (:meth:`~ascend_fleet_dev.real.nodeagent.NodeAgent.power_off`): its
heartbeats stop and its engines stop answering. What follows is Kubernetes' own doing, and this module only
watches it through the API:

1. the node lifecycle controller marks the node's Ready condition ``Unknown`` once no heartbeat came for its
   grace period (``--node-monitor-grace-period``), and the node's pods ``Ready=False``;
2. from that moment a Service's endpoints and an InferencePool's picker leave those pods out, as both go by the
   pod's Ready condition: the failover. (The dev cluster's pod IPs are loopback addresses, which EndpointSlices
   refuse, so this module reads the Ready condition those controllers read, on the serving leaders.)
3. the taint manager evicts the pods once the ``unreachable`` taint outlasts their toleration
   (``spec.availability.unreachableTolerationSeconds``).
4. with ``out_of_service``, once the pods are evicted this module taints the node
   ``node.kubernetes.io/out-of-service`` as an administrator (or a node-remediation controller) does after a
   node is known to be down (Kubernetes' non-graceful node shutdown); the pod garbage collector then removes
   its terminating pods, which no kubelet will confirm, and the operator recreates the replica on another node:
   restored once as many replicas serve on the surviving nodes as served before.

The operator does not wait for steps 1 to 4: once the node's Lease in ``kube-node-lease`` has gone unrenewed for
its threshold, it takes the replica's leader out of the serving Service (the label the Service selects on),
force-deletes its own pods there and makes the replica again on another node. With ``restore`` this module
waits for that, tainting nothing.

The floor of step 2 is the grace period less the age of the node's last heartbeat at the cut: no controller
can know a node is dead before it has been silent that long.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

from ascend_fleet.api import names
from ascend_fleet.api.times import parse_rfc3339
from ascend_fleet.kube import Kube
from ascend_fleet.render.metadata import serving_selector

_READY_POLL_SECONDS = 0.1
# What an administrator puts on a node known to be shut down (Kubernetes' non-graceful node shutdown, GA in
# 1.28): pods without a matching toleration are evicted, and the pod GC deletes those left terminating there.
OUT_OF_SERVICE_TAINT = {
    "key": "node.kubernetes.io/out-of-service",
    "value": "nodeshutdown",
    "effect": "NoExecute",
}


@dataclass
class NodeFailure:
    """Seconds from the power cut to each step (None: not seen within the timeout)."""

    node: str
    pods: list[str]
    heartbeat_age: float  # how old the node's last heartbeat (its Lease renewal) was at the cut
    grace_seconds: int
    node_unknown: float | None = None
    out_of_service: float | None = None
    evicted: float | None = None
    tainted: float | None = None  # the out-of-service taint applied (only with ``out_of_service``)
    restored: float | None = None  # as many replicas serving on the other nodes as served before the cut
    # The fewest serving leaders on other nodes seen at any moment; the dual-active promise is that it stays > 0.
    fewest_survivors: int = 0
    samples: int = field(default=0, repr=False)

    @property
    def floor(self) -> float:
        """When a node controller could first call the node dead: its grace period after the last heartbeat."""
        return max(self.grace_seconds - self.heartbeat_age, 0.0)


def serving_leaders(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    """The leaders of inference ``name`` that take traffic now, as pod name to node name: selected by the
    serving Service, Ready, and not being deleted."""
    ready = {}
    for pod in kube.list("Pod", namespace, serving_selector(name)):
        conditions = (pod.get("status") or {}).get("conditions") or []
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            ready[pod["metadata"]["name"]] = pod["spec"].get("nodeName", "")
    return ready


def _node_ready(kube: Kube, node: str) -> str:
    conditions = (kube.get("Node", None, node).get("status") or {}).get("conditions") or []
    return next((c.get("status", "") for c in conditions if c.get("type") == "Ready"), "")


def _heartbeat_age(kube: Kube, node: str) -> float:
    lease = kube.get("Lease", "kube-node-lease", node)
    renewed = parse_rfc3339(lease["spec"].get("renewTime"))
    if renewed is None:
        raise RuntimeError(f"the Lease of {node} has no renewTime")
    return time.time() - renewed


def _taint_out_of_service(kube: Kube, node: str) -> None:
    taints = (kube.get("Node", None, node).get("spec") or {}).get("taints") or []
    kube.patch("Node", None, node, {"spec": {"taints": [*taints, OUT_OF_SERVICE_TAINT]}})


def kill_serving_node(
    agent,
    kube: Kube,
    namespace: str,
    name: str,
    grace_seconds: int,
    timeout: float = 120.0,
    out_of_service: bool = False,
    spare: Collection[str] = (),
    restore: bool = False,
) -> NodeFailure:
    """Cut the power of the first node (by name) under a serving leader of ``name``, bar the ``spare`` ones,
    and time what Kubernetes does: until the pods are evicted, or with ``out_of_service`` (the taint applied
    once they are) or ``restore`` (no taint) until the replica serves again elsewhere."""
    before = serving_leaders(kube, namespace, name)
    if len(set(before.values())) < 2:
        raise RuntimeError(f"{name} serves from {len(set(before.values()))} node(s); a failover needs 2")
    candidates = sorted(set(before.values()) - set(spare))
    if not candidates:
        raise RuntimeError(f"every node serving {name} is spared ({', '.join(sorted(spare))})")
    node = candidates[0]
    age = _heartbeat_age(kube, node)
    began = time.monotonic()
    pods = agent.power_off(node)
    failure = NodeFailure(node, pods, age, grace_seconds, fewest_survivors=len(before))
    deadline = began + timeout
    while time.monotonic() < deadline and not _done(failure, out_of_service or restore):
        _observe(kube, namespace, name, failure, len(before), time.monotonic() - began)
        if out_of_service and failure.evicted is not None and failure.tainted is None:
            _taint_out_of_service(kube, node)
            failure.tainted = time.monotonic() - began
        time.sleep(_READY_POLL_SECONDS)
    return failure


def _engine_pods_gone(kube: Kube, namespace: str, name: str, node: str, cut: Collection[str]) -> bool:
    """Whether every engine pod of ``name`` on ``node`` is being deleted or gone (the operator force-deletes
    them once the node's Lease is stale). Only the engine pods tolerate the node's taints for
    ``spec.availability``'s short time; anything else there (a picker pod) keeps the default 300 s."""
    pods = [
        p
        for p in kube.list("Pod", namespace, {names.LABEL_NAME: name})
        if (p.get("spec") or {}).get("nodeName") == node
        and names.LABEL_REPLICA in p["metadata"].get("labels", {})
    ]
    if not pods:  # gone: only if the cut hit engine pods of ``name`` there at all
        return any(pod.startswith(f"{name}-") for pod in cut)
    return all(p["metadata"].get("deletionTimestamp") for p in pods)


def _done(failure: NodeFailure, out_of_service: bool) -> bool:
    return (failure.restored if out_of_service else failure.evicted) is not None


def _observe(kube: Kube, namespace: str, name: str, failure: NodeFailure, serving: int, now: float) -> None:
    node = failure.node
    ready = serving_leaders(kube, namespace, name)
    survivors = sum(1 for n in ready.values() if n != node)
    failure.samples += 1
    failure.fewest_survivors = min(failure.fewest_survivors, survivors)
    if failure.node_unknown is None and _node_ready(kube, node) == "Unknown":
        failure.node_unknown = now
    if failure.out_of_service is None and node not in ready.values():
        failure.out_of_service = now
    if failure.evicted is None and _engine_pods_gone(kube, namespace, name, node, failure.pods):
        failure.evicted = now
    if failure.out_of_service is not None and failure.restored is None and survivors >= serving:
        failure.restored = now
