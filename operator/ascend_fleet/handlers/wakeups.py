"""Per-object wake-up flags: a watch event about an object or its children cuts the reconciler's wait short.

All flags live on kopf's event loop: the handlers that set them and the daemons that wait on them
are coroutines on that loop, so no locking is needed.
"""

from __future__ import annotations

import asyncio


class Wakeups:
    """One asyncio.Event per (namespace, name)."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], asyncio.Event] = {}

    def flag(self, namespace: str, name: str) -> asyncio.Event:
        return self._events.setdefault((namespace, name), asyncio.Event())

    def wake(self, namespace: str, name: str) -> None:
        self.flag(namespace, name).set()

    def wake_all(self) -> None:
        for flag in self._events.values():
            flag.set()

    def forget(self, namespace: str, name: str) -> None:
        self._events.pop((namespace, name), None)
