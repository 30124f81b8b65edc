"""Where replicas go: spread over failure domains, and how fast a dead node's pods leave it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .fields import Model

TOPOLOGY_KEYS: dict[str, str] = {
    "node": "kubernetes.io/hostname",
    "zone": "topology.kubernetes.io/zone",
}
UNREACHABLE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
DEFAULT_UNREACHABLE_TOLERATION_SECONDS = 5


class Availability(Model):
    """Dual-active placement: replicas on distinct nodes or zones, evicted quickly off a dead node."""

    spread: Literal["node", "zone"] = Field(
        default="node", description="The failure domain replicas spread over: node or zone."
    )
    min_domains: int = Field(
        default=2,
        ge=2,
        le=64,
        description="Domains the replicas must cover; fewer eligible domains leave the extra replica Pending.",
    )
    unreachable_toleration_seconds: int = Field(
        default=DEFAULT_UNREACHABLE_TOLERATION_SECONDS,
        ge=0,
        le=300,
        description="Seconds an engine pod stays on an unreachable or not-ready node before eviction.",
    )
