"""Per-object wake-up flags: a watch event about an object or its children cuts the reconciler's wait short."""

from __future__ import annotations

import threading


class Wakeups:
    """Thread-safe registry of one Event per (namespace, name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], threading.Event] = {}

    def flag(self, namespace: str, name: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault((namespace, name), threading.Event())

    def wake(self, namespace: str, name: str) -> None:
        self.flag(namespace, name).set()

    def wake_all(self) -> None:
        with self._lock:
            flags = list(self._events.values())
        for flag in flags:
            flag.set()

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._events.pop((namespace, name), None)
