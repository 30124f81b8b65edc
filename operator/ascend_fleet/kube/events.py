"""Event aggregation as Kubernetes' own recorder does it: a repeated Event is counted up, not posted again.

client-go's EventCorrelator keys an Event by its source, involved object, type, reason and message;
when the same key is recorded again it PATCHes the existing Event's ``count`` and ``lastTimestamp``
instead of creating another object. A controller that reports the same refusal on every retry then
costs one Event object per distinct message, and ``kubectl describe`` shows "(x12 over 5m)".

The decision is pure (:func:`correlate`); :class:`EventCache` keeps the recent keys, bounded and
thread-safe, because reconcile passes for different objects run in worker threads at the same time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

# How long a recorded Event is counted up rather than posted anew. client-go's aggregation window
# is ten minutes; the API server keeps Events for an hour (--event-ttl), so a PATCH inside the
# window finds its Event.
WINDOW_SECONDS = 600.0
# client-go keeps 4096 keys in its LRU; a fleet of thousands of objects records a few keys each.
CACHE_SIZE = 16384


@dataclass(frozen=True)
class EventKey:
    """What makes two Events "the same" (client-go's getEventKey, minus the fields we never vary)."""

    component: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Seen:
    """An Event already recorded under a key: its object name, count and first time."""

    name: str
    count: int
    first: str  # RFC 3339, kept as the server stored it
    at: float  # when it was last recorded, for the window


@dataclass(frozen=True)
class Correlation:
    """Post a new Event (``patch_name`` None) or PATCH ``patch_name`` to ``count``."""

    patch_name: str | None
    count: int
    first: str | None


def correlate(previous: Seen | None, now: float, window: float = WINDOW_SECONDS) -> Correlation:
    """What to write for an Event whose key was last recorded as ``previous`` (None: never, or evicted)."""
    if previous is None or now - previous.at > window:
        return Correlation(None, 1, None)
    return Correlation(previous.name, previous.count + 1, previous.first)


class EventCache:
    """The recently recorded keys, least recently used evicted first."""

    def __init__(self, size: int = CACHE_SIZE, window: float = WINDOW_SECONDS):
        self.size, self.window = size, window
        self._seen: OrderedDict[EventKey, Seen] = OrderedDict()
        self._lock = threading.Lock()

    def decide(self, key: EventKey, now: float) -> Correlation:
        with self._lock:
            return correlate(self._seen.get(key), now, self.window)

    def remember(self, key: EventKey, seen: Seen) -> None:
        with self._lock:
            self._seen[key] = seen
            self._seen.move_to_end(key)
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)

    def forget(self, key: EventKey) -> None:
        with self._lock:
            self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen)
