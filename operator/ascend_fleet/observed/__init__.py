"""What the operator reads back from the cluster: its engine pods, the replicas they make up, conditions."""

from .pods import (
    ObservedPod,
    ObservedReplica,
    get_condition,
    observed_replicas,
    pod_condition,
    pod_ready,
    slim_pod,
)

__all__ = [
    "ObservedPod",
    "ObservedReplica",
    "get_condition",
    "observed_replicas",
    "pod_condition",
    "pod_ready",
    "slim_pod",
]
