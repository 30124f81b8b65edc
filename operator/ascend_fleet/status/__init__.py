"""Pure status derivation: conditions in the standard shape and the fleet's counts."""

from .conditions import CONDITION_TYPES, set_condition
from .fleet import PodState, ReplicaState, replica_states

__all__ = ["CONDITION_TYPES", "PodState", "ReplicaState", "replica_states", "set_condition"]
