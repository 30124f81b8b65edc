"""What one reconcile pass observed and the writes it decided, in the order the applier performs them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api.settings import ReconcileSettings
from .refusals import Refusal
from .timing import MIN_REQUEUE_SECONDS


@dataclass(frozen=True)
class Patch:
    kind: str
    name: str
    body: dict


@dataclass(frozen=True)
class Delete:
    kind: str
    name: str
    # Remove at once, without the kubelet's confirmation: only the operator's own pods on a dead node.
    force: bool = False


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str
    # Reports a status transition (not a child write): recorded only once that status is stored,
    # so a pass whose status write loses a conflict does not report it twice.
    with_status: bool = False


@dataclass
class Observed:
    """Children that carry this object's ownerReference (the caller filters by uid)."""

    pods: list[dict] = field(default_factory=list)
    services: dict[str, dict] = field(default_factory=dict)
    pdb: dict | None = None
    network_policy: dict | None = None
    # Children whose create the API server refused, by (kind, name): retried with backoff, reported in Ready.
    refused: dict[tuple[str, str], Refusal] = field(default_factory=dict)
    # Owned routing objects by (kind, name), listed this pass (see observe.observe_routing); the picker's
    # Service is in ``services``. Empty when nothing was listed (mode service without leftovers).
    routing: dict[tuple[str, str], dict] = field(default_factory=dict)
    # Routing kinds whose API the server does not serve this pass (their CRD is not installed).
    routing_missing: frozenset[str] = frozenset()
    # Nodes whose Lease has not been renewed for NODE_LEASE_STALE_SECONDS (reconcile.nodeleases).
    dead_nodes: frozenset[str] = frozenset()

    def held_back(self, kind: str, name: str, now: float, settings: ReconcileSettings) -> float | None:
        """Seconds until a refused child may be tried again (None: it may be created now)."""
        refusal = self.refused.get((kind, name))
        if refusal is None:
            return None
        wait = refusal.retry_at(settings.backoff_initial, settings.backoff_max) - now
        return wait if wait > 0 else None


@dataclass
class PassPlan:
    """Writes for one pass, in the order the applier performs them."""

    creates: list[dict] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    status: dict = field(default_factory=dict)
    requeue_after: float | None = None

    def later(self, seconds: float) -> None:
        """Ask for another pass within ``seconds``."""
        seconds = max(seconds, MIN_REQUEUE_SECONDS)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    @property
    def writes_children(self) -> bool:
        return bool(self.creates or self.patches or self.deletes)
