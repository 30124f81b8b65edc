"""Pure manifest builders: every child object of an AscendInference, derived from its spec alone."""

from .children import (
    drain_patch,
    network_policy,
    render_all,
    render_pdb,
    render_replica,
    render_services,
    revision,
    uses_volcano,
)
from .engine import EXPORTER_PORT
from .metadata import Owner, leader_selector, pod_group_name, pod_name
from .validation import InvalidSpec, Valid, validate

__all__ = [
    "EXPORTER_PORT",
    "InvalidSpec",
    "Owner",
    "Valid",
    "drain_patch",
    "network_policy",
    "leader_selector",
    "pod_group_name",
    "pod_name",
    "render_all",
    "render_pdb",
    "render_replica",
    "render_services",
    "revision",
    "uses_volcano",
    "validate",
]
