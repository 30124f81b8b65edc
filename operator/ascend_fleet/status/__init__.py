"""Pure status derivation: an AscendInference's ``.status``, its conditions in the standard shape."""

from ..observed import pod_ready  # only for demo/runner.py's import while demo/ is being moved; then delete
from .conditions import CONDITION_TYPES, set_condition
from .serving import fleet_serving

__all__ = [
    "CONDITION_TYPES",
    "fleet_serving",
    "pod_ready",
    "set_condition",
]
