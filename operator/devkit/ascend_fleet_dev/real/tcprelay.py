"""A TCP relay: what stands in for a pod's own network namespace where the pods of one host share its addresses.

A program that listens on its port on every address (llm-d's P/D sidecar) cannot take a pod's port on a host
where other pods hold the same port on their own addresses: it takes a free port, and a relay gives it the pod's
address. One that calls ``localhost`` for its neighbour in the pod reaches it through a relay the other way.
Bytes pass unchanged, both ways, until either side closes.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading

_CHUNK = 65536


class TcpRelay(socketserver.ThreadingTCPServer):
    """Every connection to ``(host, port)`` forwarded to ``target_host:target``, both ways, until either
    closes."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, target: int, target_host: str = "127.0.0.1") -> None:
        self.target, self.target_host = target, target_host
        super().__init__((host, port), _Forward)
        threading.Thread(target=self.serve_forever, name=f"relay {host}:{port}", daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Forward(socketserver.BaseRequestHandler):
    server: TcpRelay

    def handle(self) -> None:
        with socket.create_connection((self.server.target_host, self.server.target), timeout=600) as upstream:
            back = threading.Thread(target=_pipe, args=(upstream, self.request), daemon=True)
            back.start()
            _pipe(self.request, upstream)
            back.join()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink``'s writing side."""
    with contextlib.suppress(OSError):
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
