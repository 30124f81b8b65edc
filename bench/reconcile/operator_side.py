"""The operator under measurement, in its own process: its memory is its own, its requests are counted.

Runs the whole operator (kopf, the watch caches, one reconciler per object) with a client that counts every
request it sends, by ``METHOD resource[/subresource]``. kopf's own list and watch requests (one set per
watched kind, not per object) go through kopf's HTTP client and are not in the counts.

It also keeps, per AscendInference, what its status writes said (:class:`StatusLog`: a digest of each body
without its timestamps, and a short signature of each state), and which children were written more than
once, so the benchmark can tell real status changes from repeats.

Commands on stdin, one per line, each answered by one JSON line: ``mark`` (start counting afresh),
``report`` (the counts since the mark, and this process's memory), ``quit``.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from ascend_fleet.api import names
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread
from ascend_fleet.kube import Kube, Request

from ..control.operator_side import connect, peak_rss_mib, rss_mib


def classify(method: str, path: str, query: list | None) -> str:
    """``METHOD resource[/subresource]`` of one request path."""
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2 :]
    else:
        parts = parts[-1:]
    resource = parts[0]
    if len(parts) == 3:
        resource += "/" + parts[2]
    if method == "GET" and any(k == "watch" for k, _ in query or []):
        method = "WATCH"
    return f"{method} {resource}"


# Keys whose value is a time: two writes that differ only in these said the same thing.
TIME_KEYS = frozenset({"lastTransitionTime", "lastTime", "time"})


def without_times(value: Any) -> Any:
    """A status body with every timestamp removed (pure)."""
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k not in TIME_KEYS}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


def signature(status: dict) -> str:
    """A status state in a few words: ready replicas, then Ready's and Progressing's reasons."""
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready") or {}
    progressing = conditions.get("Progressing") or {}
    return (
        f"{status.get('readyReplicas', 0)}/{status.get('replicas', 0)} "
        f"{ready.get('reason', '-')}/{progressing.get('reason', '-')}"
    )


@dataclass
class StatusLog:
    """One object's status writes since the mark: digests, not bodies (the operator's memory is measured)."""

    writes: int = 0
    repeats: int = 0  # writes whose body (timestamps aside) equals this object's previous write
    last: bytes = b""
    digests: set[bytes] = field(default_factory=set)
    states: list[str] = field(default_factory=list)  # signatures of the changed writes, in order

    def add(self, status: dict) -> None:
        digest = hashlib.blake2b(
            json.dumps(without_times(status), sort_keys=True).encode(), digest_size=16
        ).digest()
        self.writes += 1
        if digest == self.last:
            self.repeats += 1
        else:
            self.states.append(signature(status))
        self.last = digest
        self.digests.add(digest)


def summarize_statuses(logs: dict[str, StatusLog]) -> dict:
    """Totals over objects: writes, changes, distinct bodies, repeats, and the commonest sequences."""
    sequences = collections.Counter(" -> ".join(log.states) for log in logs.values())
    return {
        "objects": len(logs),
        "writes": sum(log.writes for log in logs.values()),
        "changes": sum(log.writes - log.repeats for log in logs.values()),
        "distinct": sum(len(log.digests) for log in logs.values()),
        "repeats": sum(log.repeats for log in logs.values()),
        "sequences": sequences.most_common(4),
    }


def written_name(method: str, path: str, body: Any) -> str | None:
    """The name a write is about: the path's, or for a create the body's."""
    if method == "POST":
        return ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 3 < len(parts):
        return parts[parts.index("namespaces") + 3]
    return None


class CountingKube(Kube):
    """The operator's client, counting what it sends and recording what its status writes said."""

    def __init__(self, inner: Kube):
        super().__init__(inner.api, user_agent=inner.api.user_agent, on_request=self.observe)
        self.counts: collections.Counter[str] = collections.Counter()
        self.statuses: dict[str, StatusLog] = {}
        self.status_conflicts = 0
        self.child_writes: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()

    def observe(self, request: Request) -> None:
        """The request hook: count every request, and record each successful write by the name it is about."""
        kind = classify(request.method, request.path, request.query)
        status_write = kind == f"PATCH {names.PLURAL}/status"
        with self._lock:
            self.counts[kind] += 1
            if request.status == 409 and status_write:
                self.status_conflicts += 1
        if not 200 <= request.status <= 299 or request.method not in ("POST", "PUT", "PATCH"):
            return
        name = written_name(request.method, request.path, request.body)
        if name is not None and not kind.startswith(("POST events", "PATCH events")):
            with self._lock:
                if status_write:
                    self.statuses.setdefault(name, StatusLog()).add(request.body.get("status") or {})
                else:
                    self.child_writes[(kind, name)] += 1

    def take(self) -> dict[str, int]:
        with self._lock:
            counts, self.counts = dict(self.counts), collections.Counter()
        return counts

    def take_statuses(self) -> dict:
        """What the status writes since the last call said, and the children written more than once."""
        with self._lock:
            logs, self.statuses = self.statuses, {}
            conflicts, self.status_conflicts = self.status_conflicts, 0
            children, self.child_writes = self.child_writes, collections.Counter()
        twice = {f"{kind} {name}": n for (kind, name), n in children.items() if n > 1}
        return {
            **summarize_statuses(logs),
            "conflicts": conflicts,
            "children_written_twice": len(twice),
            "children_twice_examples": sorted(twice.items())[:5],
        }


STOP_SECONDS = 600.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api")
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    kube = CountingKube(connect(args.api, args.kubeconfig))
    settings = OperatorSettings()  # production timers: resync every 30 s
    baseline = rss_mib()
    with OperatorThread(OperatorContext(settings, kube)) as thread:
        print(json.dumps({"ready": True, "rss_mib": round(baseline, 1)}), flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "mark":
                kube.take()
                kube.take_statuses()
                print(json.dumps({"marked": True}), flush=True)
            elif command == "report":
                print(
                    json.dumps(
                        {
                            "counts": kube.take(),
                            "statuses": kube.take_statuses(),
                            "rss_mib": round(rss_mib(), 1),
                            "peak_rss_mib": round(peak_rss_mib(), 1),
                        }
                    ),
                    flush=True,
                )
            elif command == "quit":
                break
        # Stopping 10,000 daemons takes longer than OperatorThread's default wait; a process that exits
        # before they stop has them fail to schedule their last pass on an executor already shut down.
        thread.stop(timeout=STOP_SECONDS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
