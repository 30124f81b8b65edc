"""The operator under measurement, in its own process: its memory is its own, its requests are counted.

Runs the whole operator (kopf, the watch caches, one reconciler per object) with a client that counts every
request it sends, by ``METHOD resource[/subresource]``. kopf's own list and watch requests (one set per
watched kind, not per object) go through kopf's HTTP client and are not in the counts.

Commands on stdin, one per line, each answered by one JSON line: ``mark`` (start counting afresh),
``report`` (the counts since the mark, and this process's memory), ``quit``.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
import threading
from typing import Any

from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread
from ascend_fleet.kube import Kube

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


class CountingKube(Kube):
    """The operator's client, counting what it sends."""

    def __init__(self, inner: Kube):
        super().__init__(inner.api, user_agent=inner.api.user_agent)
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list | None = None,
        content_type: str = "application/json",
    ) -> dict:
        with self._lock:
            self.counts[classify(method, path, query)] += 1
        return super()._call(method, path, body, query, content_type)

    def take(self) -> dict[str, int]:
        with self._lock:
            counts, self.counts = dict(self.counts), collections.Counter()
        return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api")
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    kube = CountingKube(connect(args.api, args.kubeconfig))
    settings = OperatorSettings()  # production timers: resync every 30 s
    baseline = rss_mib()
    with OperatorThread(OperatorContext(settings, kube)):
        print(json.dumps({"ready": True, "rss_mib": round(baseline, 1)}), flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "mark":
                kube.take()
                print(json.dumps({"marked": True}), flush=True)
            elif command == "report":
                print(
                    json.dumps(
                        {
                            "counts": kube.take(),
                            "rss_mib": round(rss_mib(), 1),
                            "peak_rss_mib": round(peak_rss_mib(), 1),
                        }
                    ),
                    flush=True,
                )
            elif command == "quit":
                break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
