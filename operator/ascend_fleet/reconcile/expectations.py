"""Expectations: the writes a pass issued that the watch cache has not shown yet (pure bookkeeping).

A pass decides from the watch cache, and the cache lags the API server by one watch event. Without
this, the pass after a create sees no pod yet and creates it again (AlreadyExists at best; for a gang,
a missing rank reads as a failed replica and the whole gang is recreated). ReplicaSet's controller
keeps "expectations" for the same reason; here they are per object and per child:

- a create is fulfilled once the cache holds the child (owned by us or not: a foreign one is a
  name conflict and is reported, never waited on);
- a delete once the child is gone from the cache or carries a deletionTimestamp;
- a patch once the cached child's resourceVersion is at least the one the patch returned.

While any is pending the reconciler does not plan (no writes, no status from a stale view) and
waits for the watch. An expectation older than ``ttl`` is dropped: a watch event can be lost, and
the next level-based pass then works from what the cache shows (ReplicaSet uses five minutes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .timing import EXPECTATIONS_TTL_SECONDS

# The kinds the operator's watch cache holds (children_by_name): only their writes can be seen arriving. A
# write to another kind (a Volcano PodGroup) is not waited for; its create is idempotent (AlreadyExists).
CACHED_KINDS = ("Pod", "Service", "PodDisruptionBudget", "NetworkPolicy")

CREATE, DELETE, PATCH = "create", "delete", "patch"


@dataclass(frozen=True)
class Expectation:
    """One write of a pass: ``op`` on the child ``kind``/``name``, issued at ``issued``."""

    op: str  # create | delete | patch
    kind: str
    name: str
    issued: float
    version: str | None = None  # the resourceVersion a patch returned


def fulfilled(expectation: Expectation, cached: dict | None) -> bool:
    """Whether the cached child (None: not in the cache) shows the write."""
    if expectation.op == CREATE:
        return cached is not None
    if expectation.op == DELETE:
        return cached is None or bool((cached.get("metadata") or {}).get("deletionTimestamp"))
    if cached is None:  # patched, then deleted by someone: nothing left to wait for
        return True
    return _at_least((cached.get("metadata") or {}).get("resourceVersion"), expectation.version)


def _at_least(have: str | None, want: str | None) -> bool:
    """resourceVersions are opaque by contract; etcd's (and the local API's) are increasing integers."""
    if want is None:
        return True
    try:
        return int(have or "") >= int(want)
    except ValueError:
        return have == want


@dataclass
class Expectations:
    """Pending expectations of every object, keyed by (namespace, name) of the AscendInference."""

    ttl: float = EXPECTATIONS_TTL_SECONDS
    _pending: dict[tuple[str, str], list[Expectation]] = field(default_factory=dict)

    def expect(self, key: tuple[str, str], writes: Iterable[Expectation]) -> None:
        """Remember a pass's writes (a later write to the same child replaces the earlier one)."""
        merged = {(e.kind, e.name): e for e in self._pending.get(key, [])}
        merged.update({(e.kind, e.name): e for e in writes if e.kind in CACHED_KINDS})
        if merged:
            self._pending[key] = list(merged.values())

    def pending(
        self, key: tuple[str, str], cache: Mapping[tuple[str, str], dict], now: float
    ) -> list[Expectation]:
        """The expectations not yet fulfilled by ``cache`` ((kind, name) -> child) nor expired; forgets the rest."""
        left = [
            e
            for e in self._pending.get(key, [])
            if now - e.issued < self.ttl and not fulfilled(e, cache.get((e.kind, e.name)))
        ]
        if left:
            self._pending[key] = left
        else:
            self._pending.pop(key, None)
        return left

    def wait_hint(self, key: tuple[str, str], now: float) -> float | None:
        """Seconds until the oldest pending expectation expires (None when nothing is pending)."""
        items = self._pending.get(key)
        if not items:
            return None
        return max(0.0, min(e.issued for e in items) + self.ttl - now)

    def forget(self, key: tuple[str, str]) -> None:
        self._pending.pop(key, None)


def children_by_name(
    pods: Iterable[dict], services: Iterable[dict], pdbs: Iterable[dict], policies: Iterable[dict] = ()
) -> dict[tuple[str, str], dict]:
    """The cache as expectations read it: every candidate child by (kind, name), owned or not."""
    result: dict[tuple[str, str], dict] = {}
    for kind, items in zip(CACHED_KINDS, (pods, services, pdbs, policies), strict=True):
        for item in items:
            name = (item.get("metadata") or {}).get("name")
            if name:
                result[(kind, name)] = item
    return result
