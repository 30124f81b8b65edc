"""The ``/metrics`` HTTP endpoint, bound by at most one engine process of a pod at a time.

Every engine process tries to bind the port; the kernel lets exactly one succeed, and that one
serves the union of all processes' records. Nobody sets ``SO_REUSEPORT``, which would let several
processes bind and split the scrapes between them. When the serving process dies the port frees
up, and the next attempt of a surviving process takes it over.
"""

from __future__ import annotations

import errno
import logging
import socket
import socketserver
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from ascend_fleet_exporter.config import METRICS_PATH
from ascend_fleet_exporter.door import SnapshotDoor
from ascend_fleet_exporter.metrics import CONTENT_TYPE
from ascend_fleet_exporter.snapshot import SNAPSHOT_PATH, Answer

_log = logging.getLogger(__name__)

_INDEX = b"ascend-fleet NPU exporter: metrics at " + METRICS_PATH.encode() + b"\n"
# Errors that mean "no IPv6 here" rather than "port taken": fall back to IPv4 then.
_NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT})


class MetricsServer(ThreadingHTTPServer):
    """A threading HTTP server whose ``/metrics`` body comes from a render callable."""

    daemon_threads = True
    # Reuse a port whose previous owner left connections in TIME_WAIT; on Linux this never lets two
    # live listeners share it.
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        render: Callable[[], str],
        snapshots: Callable[[str], Answer] | None = None,
        door: SnapshotDoor | None = None,
    ) -> None:
        self.render = render
        # GET or POST on the snapshot path: list or request memory snapshots; None: the path is not served
        self.snapshots = snapshots
        self.door = door or SnapshotDoor()  # who may use it: loopback peers unless a token file is set
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS round trip nobody here needs.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", self.server_address[1]


class _DualStackServer(MetricsServer):
    """Listens on ``::`` for IPv6 and, through mapped addresses, IPv4."""

    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def bind(
    port: int,
    render: Callable[[], str],
    snapshots: Callable[[str], Answer] | None = None,
    door: SnapshotDoor | None = None,
) -> MetricsServer | None:
    """A server on ``port`` on all addresses, or ``None`` when the port is taken (by a sibling, normally)."""
    try:
        return _DualStackServer(("::", port), render, snapshots, door)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            return None
        if error.errno not in _NO_IPV6:
            raise
    try:
        return MetricsServer(("0.0.0.0", port), render, snapshots, door)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            return None
        raise


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    server_version = "ascend-fleet-exporter"

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == METRICS_PATH:
            try:
                body = self.server.render().encode("utf-8")
            except Exception:
                _log.exception("rendering %s failed", METRICS_PATH)
                self._reply(
                    500, b"rendering metrics failed; see the engine log\n", "text/plain; charset=utf-8"
                )
                return
            self._reply(200, body, CONTENT_TYPE)
        elif path == SNAPSHOT_PATH and self.server.snapshots is not None:
            self._snapshot("GET")
        elif path == "/":
            self._reply(200, _INDEX, "text/plain; charset=utf-8")
        else:
            self._reply(
                404,
                b"not found; metrics are at " + METRICS_PATH.encode() + b"\n",
                "text/plain; charset=utf-8",
            )

    def do_POST(self) -> None:
        if urlsplit(self.path).path == SNAPSHOT_PATH and self.server.snapshots is not None:
            self._snapshot("POST")
        else:
            self._reply(404, b"nothing to POST here\n", "text/plain; charset=utf-8")

    def _snapshot(self, method: str) -> None:
        """The snapshot path, behind its door (a request body, if any, is never read)."""
        assert self.server.snapshots is not None
        refused = self.server.door.refusal(self.client_address[0], self.headers.get("Authorization"))
        if refused is not None:
            _log.debug(
                "refused %s %s from %s (%d)", method, SNAPSHOT_PATH, self.client_address[0], refused.status
            )
            self._answer(refused, {"WWW-Authenticate": "Bearer"} if refused.status == 401 else {})
            return
        self._answer(self.server.snapshots(method))

    def _answer(self, answer: Answer, headers: dict[str, str] | None = None) -> None:
        self._reply(answer.status, answer.text.encode("utf-8"), "text/plain; charset=utf-8", headers)

    def _reply(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # One line per scrape would flood the engine's log; keep it for debugging only.
        _log.debug("%s " + format, self.address_string(), *args)
