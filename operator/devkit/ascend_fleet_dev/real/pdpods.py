"""The pods of a prefill/decode pool on the real control plane, run as real processes (a node agent listener).

:class:`DisaggregatedPods` runs each engine pod the node agent starts according to its role label:

- a prefill pod: a prefill ``vllm serve`` of the tiny model on the pod's IP and the pool's port;
- a decode pod: a decode ``vllm serve`` on a free port of 127.0.0.1 and llm-d's P/D sidecar in front of it,
  reached on the pod's IP and the pool's port through a TCP relay.

Both engines use ExampleConnector over one directory (:mod:`.disaggregation`). The relay stands in for the
pod's own network namespace: the sidecar listens on its port on every address, so on one host it cannot take
the pool's port without taking it from the prefill pod too; it takes a free port, and the relay gives it the
decode pod's address. Requests, ``/health`` and ``/metrics`` pass through it unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascend_fleet_dev.real.disaggregation import ENGINE_START_TIMEOUT, PdSidecar, TinyEngine
from ascend_fleet_dev.real.vllm_env import VllmCpu

_CHUNK = 65536


class TcpRelay(socketserver.ThreadingTCPServer):
    """Every connection to ``(host, port)`` forwarded to ``127.0.0.1:target``, both ways, until either closes."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, target: int) -> None:
        self.target = target
        super().__init__((host, port), _Forward)
        threading.Thread(target=self.serve_forever, name=f"relay {host}:{port}", daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Forward(socketserver.BaseRequestHandler):
    server: TcpRelay

    def handle(self) -> None:
        with socket.create_connection(("127.0.0.1", self.server.target), timeout=600) as upstream:
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


class DisaggregatedPods:
    """A node agent listener that runs prefill and decode pods (see the module docstring)."""

    def __init__(
        self,
        environment: VllmCpu,
        *,
        label: str,
        port: int,
        served_name: str,
        workdir: Path,
        sidecar_binary: str | Path | None = None,
    ) -> None:
        """``label`` names a pod's role (``prefill`` or ``decode``), ``port`` is the pool's target port."""
        self.environment, self.label, self.port, self.served_name = environment, label, port, served_name
        self.workdir, self.sidecar_binary = workdir, sidecar_binary
        self.shared = workdir / "kv"
        self.shared.mkdir(parents=True, exist_ok=True)
        self.engines: dict[str, TinyEngine] = {}
        self._stops: dict[str, list[Callable[[], None]]] = {}
        self._lock = threading.Lock()

    def on_pod_running(self, pod: dict[str, Any]) -> None:
        role = pod["metadata"].get("labels", {}).get(self.label)
        name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
        if role not in ("prefill", "decode"):
            return
        workdir = self.workdir / name
        workdir.mkdir(exist_ok=True)
        if role == "prefill":
            engine = TinyEngine(
                self.environment,
                role,
                self.shared,
                workdir,
                host=ip,
                port=self.port,
                served_name=self.served_name,
            )
            stops = [engine.stop]
        else:
            engine = TinyEngine(self.environment, role, self.shared, workdir, served_name=self.served_name)
            sidecar = PdSidecar(engine.port, binary=self.sidecar_binary, workdir=workdir)
            relay = TcpRelay(ip, self.port, sidecar.port)
            stops = [relay.close, sidecar.stop, engine.stop]
        with self._lock:
            self.engines[role], self._stops[name] = engine, stops
        engine.start()
        if role == "decode":
            sidecar.start()

    def on_pod_stopped(self, pod: dict[str, Any]) -> None:
        with self._lock:
            stops = self._stops.pop(pod["metadata"]["name"], [])
        for stop in stops:
            stop()

    def wait_healthy(self, timeout: float = ENGINE_START_TIMEOUT) -> None:
        """Wait until both engines answer ``/health``."""
        for role in ("prefill", "decode"):
            self.engines[role].wait_healthy(timeout)

    def close(self) -> None:
        """Stop every process and relay still running."""
        with self._lock:
            everything, self._stops = list(self._stops.values()), {}
        for stops in everything:
            for stop in stops:
                stop()
