"""Watches of the local Kubernetes API: committed changes, and the stream one watch request reads.

A :class:`WatchStream` is registered with the object store when the watch opens; the store pushes every
committed :class:`Change` of the watched resource into it, and the stream turns changes into watch events
for its own scope: an object that enters a selector is ``ADDED``, one that leaves it is ``DELETED``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ascend_fleet_dev.emulator.resources import ServedResource
from ascend_fleet_dev.emulator.selectors import FieldSelector, LabelSelector


class WatchedStorage(Protocol):
    """What a watch needs of the storage that feeds it (``storage.VersionedStorage``, which imports this module)."""

    revision: int

    def present(self, served: ServedResource, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def forget_watch(self, stream: WatchStream) -> None: ...


@dataclass(frozen=True)
class Change:
    """One committed write as watches see it: its resourceVersion, event type, new and previous state."""

    revision: int
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


class WatchStream:
    """One watch: its filters and a queue of changes. Iterate it (``async for``) to get watch events.

    It ends when ``timeout`` passes, when :meth:`close` is called (server shutdown, CRD deletion), or after
    an ``ERROR`` event; leaving the iteration unregisters it from the store.
    """

    def __init__(
        self,
        store: WatchedStorage,
        served: ServedResource,
        *,
        namespace: str | None,
        name: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        bookmarks: bool,
        timeout: float | None,
        bookmark_interval: float,
    ) -> None:
        self.served = served
        self._store = store
        self._namespace = namespace
        self._name = name
        self._labels = labels
        self._fields = fields
        self._bookmarks = bookmarks
        self._timeout = timeout
        self._bookmark_interval = bookmark_interval
        self._queue: asyncio.Queue[Change | None] = asyncio.Queue()
        self._initial: list[dict[str, Any]] = []
        self._finished = False

    def begin_with(self, events: list[dict[str, Any]]) -> None:
        """Send these events first (the initial state or the replayed changes); an ERROR ends the stream."""
        self._initial = events
        self._finished = any(event["type"] == "ERROR" for event in events)

    def push(self, change: Change) -> None:
        """Queue a committed change (filtering happens when it is consumed)."""
        self._queue.put_nowait(change)

    def close(self) -> None:
        """End the stream after the changes already queued."""
        self._queue.put_nowait(None)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether an object is in this watch's scope (namespace, name, label and field selectors)."""
        metadata = obj.get("metadata", {})
        return (
            (self._namespace is None or metadata.get("namespace") == self._namespace)
            and (self._name is None or metadata.get("name") == self._name)
            and self._labels.matches(metadata.get("labels"))
            and self._fields.matches(obj)
        )

    def event_for(self, change: Change) -> dict[str, Any] | None:
        """The watch event a change means for this watch, if any (entering or leaving the selector counts)."""
        now_in = self.matches(change.obj)
        was_in = change.old is not None and self.matches(change.old)
        event_type = change.type
        if event_type == "MODIFIED" and now_in != was_in:
            event_type = "ADDED" if now_in else "DELETED"
        elif not now_in:
            return None
        return {"type": event_type, "object": self._store.present(self.served, change.obj)}

    def bookmark(self, *, initial_events_end: bool = False) -> dict[str, Any]:
        """A ``BOOKMARK`` event carrying the current resourceVersion."""
        metadata: dict[str, Any] = {"resourceVersion": str(self._store.revision)}
        if initial_events_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {
            "type": "BOOKMARK",
            "object": {"kind": self.served.kind, "apiVersion": self.served.api_version, "metadata": metadata},
        }

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout if self._timeout else None
        try:
            for initial in self._initial:
                yield initial
            while not self._finished:
                try:
                    change = await asyncio.wait_for(self._queue.get(), self._wait_time(loop, deadline))
                except TimeoutError:
                    if deadline is not None and loop.time() >= deadline:
                        return
                    yield self.bookmark()
                    continue
                if change is None:
                    return
                event = self.event_for(change)
                if event is not None:
                    yield event
        finally:
            self._store.forget_watch(self)

    def _wait_time(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> float | None:
        waits = [deadline - loop.time()] if deadline is not None else []
        if self._bookmarks:
            waits.append(self._bookmark_interval)
        return max(0.0, min(waits)) if waits else None
