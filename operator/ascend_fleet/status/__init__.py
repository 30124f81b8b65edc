"""Pure status derivation: an AscendInference's ``.status``, its conditions in the standard shape."""

from .conditions import CONDITION_TYPES, set_condition
from .serving import fleet_serving

__all__ = [
    "CONDITION_TYPES",
    "fleet_serving",
    "set_condition",
]
