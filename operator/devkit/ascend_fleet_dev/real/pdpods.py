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

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ascend_fleet_dev.real.disaggregation import ENGINE_START_TIMEOUT, PdSidecar, TinyEngine
from ascend_fleet_dev.real.tcprelay import TcpRelay
from ascend_fleet_dev.real.vllm_env import VllmCpu


class DisaggregatedPods:
    """A node agent listener that runs prefill and decode pods (see the module docstring)."""

    def __init__(
        self,
        environment: VllmCpu,
        *,
        namespace: str,
        label: str,
        port: int,
        served_name: str,
        workdir: Path,
        sidecar_binary: str | Path | None = None,
    ) -> None:
        """Runs the pods of ``namespace`` alone: the node agent tells every listener of every pod, and another
        namespace's pods may bear the same names (one being deleted must not stop these). ``label`` names a
        pod's role (``prefill`` or ``decode``), ``port`` is the pool's target port."""
        self.environment, self.label, self.port, self.served_name = environment, label, port, served_name
        self.namespace = namespace
        self.workdir, self.sidecar_binary = workdir, sidecar_binary
        self.shared = workdir / "kv"
        self.shared.mkdir(parents=True, exist_ok=True)
        self.engines: dict[str, TinyEngine] = {}
        self._stops: dict[str, list[Callable[[], None]]] = {}
        self._lock = threading.Lock()

    def on_pod_running(self, pod: dict[str, Any]) -> None:
        role = pod["metadata"].get("labels", {}).get(self.label)
        name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
        if role not in ("prefill", "decode") or not self._mine(pod):
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
        if not self._mine(pod):
            return
        with self._lock:
            stops = self._stops.pop(pod["metadata"]["name"], [])
        for stop in stops:
            stop()

    def _mine(self, pod: Mapping[str, Any]) -> bool:
        return bool(pod["metadata"].get("namespace") == self.namespace)

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
