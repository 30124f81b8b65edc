"""One HTTP endpoint that exports what every pod of a synthetic fleet would, labelled as if scraped per pod.

A real fleet of 1,000 objects x 4 pods is 4,000 scrape targets; what the control loop's cost depends on is
the number of series and how they are labelled, not how many HTTP servers produced them. So one endpoint
serves all series with the target labels (namespace, inference, replica, rank, pod) already attached, and
Prometheus scrapes it with ``honor_labels: true``. Values drift a little every second, like a busy fleet.
"""

from __future__ import annotations

import contextlib
import random
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class FleetShape:
    namespaces: int
    objects: int
    replicas: int  # pods per object: one pod per replica
    hot: int  # objects whose utilization stays above the scale-up threshold

    def objects_of(self):
        """(namespace, name, index) of every object."""
        for index in range(self.objects):
            yield f"bench-{index % self.namespaces}", f"inf-{index:05d}", index


class SyntheticExporter:
    """Serves ``/metrics`` for the whole fleet on 127.0.0.1 from a background thread."""

    def __init__(self, shape: FleetShape, seed: int = 7):
        self.shape = shape
        self._random = random.Random(seed)
        self._body = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._refresh()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                body = exporter._body
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # Prometheus may give up on a slow scrape; the next one comes soon after.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self._threads = [
            threading.Thread(target=self.server.serve_forever, daemon=True),
            threading.Thread(target=self._refresher, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def _refresher(self) -> None:
        while not self._stop.wait(1.0):
            self._refresh()

    def _refresh(self) -> None:
        rnd = self._random.random
        lines = [
            "# TYPE ascend_fleet_npu_utilization_ratio gauge",
            "# TYPE ascend_fleet_memory_fragmentation_ratio gauge",
            "# TYPE vllm:num_requests_waiting gauge",
        ]
        utilization, fragmentation, waiting = [], [], []
        for namespace, name, index in self.shape.objects_of():
            hot = index < self.shape.hot
            for replica in range(self.shape.replicas):
                labels = (
                    f'namespace="{namespace}",inference="{name}",replica="{replica}",rank="0",'
                    f'pod="{name}-{replica}",device="0"'
                )
                busy = 0.9 + 0.05 * rnd() if hot else 0.3 + 0.4 * rnd()
                utilization.append(f"ascend_fleet_npu_utilization_ratio{{{labels}}} {busy:.4f}")
                fragmentation.append(
                    f"ascend_fleet_memory_fragmentation_ratio{{{labels}}} {0.01 + 0.04 * rnd():.4f}"
                )
                waiting.append(
                    f'vllm:num_requests_waiting{{{labels},model_name="{name}",engine="0"}} {int(8 * rnd())}'
                )
        body = "\n".join([*lines[:1], *utilization, lines[1], *fragmentation, lines[2], *waiting]) + "\n"
        self._body = body.encode()
