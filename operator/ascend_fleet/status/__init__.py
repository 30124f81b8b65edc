"""Pure status derivation: conditions in the standard shape and the fleet's counts."""

from .conditions import CONDITION_TYPES, set_condition
from .fleet import (
    ObservedPod,
    ObservedReplica,
    fleet_serving,
    observed_replicas,
    pod_condition,
    pod_ready,
)

__all__ = [
    "CONDITION_TYPES",
    "ObservedPod",
    "ObservedReplica",
    "fleet_serving",
    "observed_replicas",
    "pod_condition",
    "pod_ready",
    "set_condition",
]
