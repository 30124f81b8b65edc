"""vllm-ascend engine pods as real ``vllm serve`` processes (``ascend-fleet dev-cluster --real --engines vllm``).

:class:`RealEngines` is a pod listener of the node agent. For every running vllm-ascend engine pod that
serves the OpenAI API (a replica's leader), it does what a kubelet does with the pod's engine container:

- the command, args and env are the pod's, translated for a CPU host by
  :func:`~ascend_fleet_dev.real.vllm_engine.translate` (the tiny model, float32, a small KV cache,
  one process), and the server listens on the pod's IP and its own ``--port``;
- the pod turns Ready once the readiness probe (its path on its port, vLLM's ``/health``) answers; a server
  that exits or does not answer in time leaves the container in CrashLoopBackOff, as a kubelet would;
- the pod's metrics port serves what the engine exposes: vLLM's own ``/metrics`` followed by the exporter's
  (the exporter plugin, loaded by vLLM, listens on a free port of the host: every pod shares it);
- with a Prometheus attached, each pod's metrics port is a scrape target (group ``real-engines``, the labels
  the simulated engines' targets carry) from the moment it answers until the pod stops;
- a decode pod's ``pd-sidecar`` container (a routed two-role fleet) runs beside its engine as llm-d's
  sidecar, its flags translated by :mod:`~ascend_fleet_dev.real.podsidecar`;
- each engine takes about 3 GiB, so at most ``limit`` run at once; a pod beyond that is refused (phase
  Failed) with one line that says why.

SGLang pods, and the ranks of a multi-pod replica that run no server, stay with the simulated engines
(:meth:`claims` tells them apart).
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from ascend_fleet.render.pdsidecar import PD_SIDECAR_CONTAINER
from ascend_fleet.render.template import ENGINE_CONTAINER
from ascend_fleet_dev.fleet.enginepods import (
    METRICS_PORT_NAME,
    detect_engine,
    engine_pod,
    named_container,
    scrape_target,
)
from ascend_fleet_dev.fleet.prometheus import Target
from ascend_fleet_dev.fleet.serving import DEFAULT_ENGINE
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.local.process import LocalProcess, ProcessFailed
from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable
from ascend_fleet_dev.real.disaggregation import ensure_pd_sidecar
from ascend_fleet_dev.real.podsidecar import (
    PodSidecar,
    SidecarUnfit,
    start_pod_sidecar,
)
from ascend_fleet_dev.real.vllm_engine import NotAnEngine, health_probe, serve_process, translate
from ascend_fleet_dev.real.vllm_env import VllmCpu
from ascend_fleet_exporter.config import ENV_SPOOL_DIR

_log = logging.getLogger(__name__)
DEFAULT_LIMIT = 2
START_TIMEOUT = 300.0
VLLM_DEFAULT_PORT = 8000
# The file_sd group of the real engines' targets: the simulated engines of the same stack keep their own.
TARGET_GROUP = "real-engines"


class RealEnginesUnavailable(RuntimeError):
    """Real engines cannot run here (the vLLM environment is not built, or the cluster is not the real one)."""


class PodControls(Protocol):
    """The node agent's controls a real engine needs: a container that died, a pod that was refused."""

    def crash(self, namespace: str, name: str, container: str | None = None) -> dict[str, Any]: ...

    def fail(self, namespace: str, name: str) -> dict[str, Any]: ...


class TargetGroups(Protocol):
    """Where scrape targets go, one group at a time (a :class:`~ascend_fleet_dev.fleet.prometheus.
    PrometheusServer`)."""

    def set_targets(self, targets: Iterable[Target], group: str = ...) -> None: ...


@dataclass
class RealEngine:
    """One pod's running server: the process, where it listens and the metrics relay on the pod's port."""

    uid: str
    process: LocalProcess
    url: str
    health_path: str
    exporter_port: int
    relay: ThreadingHTTPServer | None = None
    sidecar: PodSidecar | None = None  # a decode pod's P/D sidecar (a routed two-role fleet)


def named_port(container: Mapping[str, Any], port: int | str) -> int | None:
    """A probe's port: a number as it is, a name looked up in the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for entry in container.get("ports") or []:
        if entry.get("name") == port:
            return int(entry["containerPort"])
    return None


def engine_container(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod's ``engine`` container, or None."""
    return named_container(pod, ENGINE_CONTAINER)


def downward_values(pod: Mapping[str, Any]) -> dict[str, str]:
    """The fieldRef values a kubelet gives the pod's variables, one label or annotation each as
    ``metadata.labels['KEY']`` and ``metadata.annotations['KEY']``."""
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    values = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace") or "default",
        "status.podIP": status.get("podIP", ""),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName", ""),
    }
    for field in ("labels", "annotations"):
        for key, value in (metadata.get(field) or {}).items():
            values[f"metadata.{field}['{key}']"] = value
    return values


def readiness_path(container: Mapping[str, Any]) -> tuple[str, int | None]:
    """The readiness probe's HTTP path and port (vLLM's ``/health`` on ``--port`` when the pod names none)."""
    probe = (container.get("readinessProbe") or {}).get("httpGet") or {}
    port = named_port(container, probe["port"]) if "port" in probe else None
    return probe.get("path", "/health"), port


class RealEngines:
    """A pod listener running vllm-ascend engine pods as real ``vllm serve`` processes of the tiny model."""

    def __init__(
        self,
        environment: VllmCpu,
        controls: PodControls,
        *,
        limit: int = DEFAULT_LIMIT,
        workdir: str | Path | None = None,
        start_timeout: float = START_TIMEOUT,
        prometheus: TargetGroups | None = None,
        sidecar_binary: str | Path | None = None,
    ) -> None:
        """Run servers from ``environment``, at most ``limit`` at once; ``controls`` report failed starts;
        ``prometheus`` scrapes each pod's metrics port once it answers; a decode pod's P/D sidecar runs from
        ``sidecar_binary`` (default: the cached build, made when the first such pod comes)."""
        self.environment = environment
        self.sidecar_binary = Path(sidecar_binary) if sidecar_binary else None
        self.controls = controls
        self.limit = limit
        self.start_timeout = start_timeout
        self.prometheus = prometheus
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="ascend-fleet-vllm-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self._lock = threading.Lock()
        self._engines: dict[tuple[str, str], RealEngine] = {}
        self.refused: dict[tuple[str, str], str] = {}
        self._targets: dict[tuple[str, str], Target] = {}

    def claims(self, pod: Mapping[str, Any]) -> bool:
        """Whether the pod's engine runs here (a vLLM pod that starts a server), not as a simulated engine."""
        container = engine_container(pod)
        if (
            engine_pod(pod, time.time()) is None or container is None or detect_engine(pod) != DEFAULT_ENGINE
        ):  # only vLLM pods get a real engine
            return False
        try:
            translate(container, model="", field_values=downward_values(pod))
        except NotAnEngine:
            return False
        return True

    def engine(self, namespace: str, name: str) -> RealEngine | None:
        """The running server of a pod, or None."""
        with self._lock:
            return self._engines.get((namespace, name))

    def on_pod_running(self, pod: dict[str, Any]) -> None:
        """Start the pod's server and return once it is healthy (then the node agent marks the pod Ready)."""
        if not self.claims(pod):
            return
        metadata = pod["metadata"]
        key = (metadata.get("namespace") or "default", metadata["name"])
        with self._lock:
            current = self._engines.get(key)
            if current is not None and current.uid == metadata.get("uid"):
                return
            full = current is None and len(self._engines) >= self.limit
            if not full:
                engine = self._start(pod, key)
                self._engines[key] = engine
        if full:
            self._refuse(key)
            return
        sidecar = named_container(pod, PD_SIDECAR_CONTAINER)
        if sidecar is not None:
            try:
                engine.sidecar = self._start_sidecar(
                    sidecar, downward_values(pod)["status.podIP"] or "127.0.0.1"
                )
            except (DataPlaneUnavailable, SidecarUnfit, OSError) as error:
                _log.warning("the P/D sidecar of pod %s/%s did not start: %s", *key, error)
                engine.process.stop()
                self.controls.crash(*key, PD_SIDECAR_CONTAINER)
                return
        try:
            engine.process.wait_ready(
                health_probe(engine.url, engine.health_path), self.start_timeout, interval=1.0
            )
        except ProcessFailed as error:
            _log.warning("vllm serve for pod %s/%s did not start: %s", *key, error)
            if engine.sidecar is not None:
                engine.sidecar.stop()
            engine.process.stop()
            self.controls.crash(*key, ENGINE_CONTAINER)
            return
        engine.relay = self._relay(pod, engine)
        if engine.relay is not None and self.engine(*key) is engine:  # not stopped meanwhile
            host, port = engine.relay.server_address[:2]
            described = engine_pod(pod, time.time())
            assert described is not None  # claims() checked
            self._sync_targets(key, scrape_target(replace(described, ip=str(host), port=int(port))))

    def on_pod_stopped(self, pod: dict[str, Any]) -> None:
        """Stop the pod's server (SIGTERM to its process group, then SIGKILL) and its metrics relay."""
        metadata = pod["metadata"]
        key = (metadata.get("namespace") or "default", metadata["name"])
        with self._lock:
            engine = self._engines.get(key)
            if engine is None or engine.uid != metadata.get("uid"):
                return
            del self._engines[key]
        self._sync_targets(key, None)
        _stop(engine)

    def close(self) -> None:
        """Stop every server."""
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
            keys = list(self._targets)
        for key in keys:
            self._sync_targets(key, None)
        for engine in engines:
            _stop(engine)
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> RealEngines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sync_targets(self, key: tuple[str, str], target: Target | None) -> None:
        """Add (or with None drop) a pod's scrape target and hand the group to Prometheus."""
        if self.prometheus is None:
            return
        with self._lock:
            if target is None:
                self._targets.pop(key, None)
            else:
                self._targets[key] = target
            targets = [self._targets[k] for k in sorted(self._targets)]
            self.prometheus.set_targets(targets, group=TARGET_GROUP)

    def _refuse(self, key: tuple[str, str]) -> None:
        line = (
            f"pod {key[0]}/{key[1]} refused: {self.limit} real vLLM engines already run "
            f"(about 3 GiB each; raise --max-real-engines to allow more)"
        )
        self.refused[key] = line
        _log.warning("%s", line)
        self.controls.fail(*key)

    def _start(self, pod: Mapping[str, Any], key: tuple[str, str]) -> RealEngine:
        container = engine_container(pod)
        assert container is not None  # claims() checked
        ip = downward_values(pod)["status.podIP"] or "127.0.0.1"
        path, probe_port = readiness_path(container)
        exporter_port = free_port()
        served = translate(
            container,
            model=str(self.environment.model),
            field_values=downward_values(pod),
            host=ip,
            port=probe_port,
            exporter_port=exporter_port,
            vllm=str(self.environment.vllm),
        )
        port = int(dict(zip(served.argv, served.argv[1:], strict=False)).get("--port", VLLM_DEFAULT_PORT))
        work = Path(tempfile.mkdtemp(prefix=f"{key[0]}-{key[1]}-", dir=self.workdir))
        env = {**served.env, ENV_SPOOL_DIR: str(work / "spool")}
        process = serve_process(f"vllm serve ({key[0]}/{key[1]})", served.argv, env, work / "vllm.log")
        _log.info("pod %s/%s: %s (%s)", *key, " ".join(served.argv), "; ".join(served.changes))
        process.start()
        return RealEngine(
            str(pod["metadata"].get("uid")), process, f"http://{ip}:{port}", path, exporter_port
        )

    def _start_sidecar(self, container: Mapping[str, Any], ip: str) -> PodSidecar:
        if self.sidecar_binary is None:
            self.sidecar_binary = ensure_pd_sidecar()
        work = Path(tempfile.mkdtemp(prefix="pd-sidecar-", dir=self.workdir))
        sidecar = start_pod_sidecar(container, ip, binary=self.sidecar_binary, workdir=work)
        _log.info("P/D sidecar on %s:%d (%s)", ip, sidecar.flags.port, "; ".join(sidecar.flags.changes))
        return sidecar

    def _relay(self, pod: Mapping[str, Any], engine: RealEngine) -> ThreadingHTTPServer | None:
        container = engine_container(pod) or {}
        port = named_port(container, METRICS_PORT_NAME)
        if port is None:
            return None
        ip = downward_values(pod)["status.podIP"] or "127.0.0.1"
        sources = (f"{engine.url}/metrics", f"http://127.0.0.1:{engine.exporter_port}/metrics")
        try:
            return start_metrics_relay(ip, port, sources)
        except OSError as error:  # the port is held on that address: the pod runs, without a metrics endpoint
            _log.warning(
                "no metrics endpoint for pod %s on %s:%d: %s", pod["metadata"]["name"], ip, port, error
            )
            return None


def start_metrics_relay(host: str, port: int, sources: tuple[str, ...]) -> ThreadingHTTPServer:
    """``GET /metrics`` on ``host:port`` answers the text of every source in turn (an unreachable one: none)."""

    class Relay(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            body = b"".join(_read(url) for url in sources)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except ConnectionError:  # the scraper gave up (its timeout) while a busy engine answered
                pass

        def log_message(self, *args: object) -> None:
            pass  # a scrape a second would drown the dev cluster's output

    server = ThreadingHTTPServer((host, port), Relay)
    threading.Thread(target=server.serve_forever, name=f"metrics relay {host}:{port}", daemon=True).start()
    return server


def _read(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text: bytes = response.read()
            return text if text.endswith(b"\n") else text + b"\n"
    except OSError:
        return b""


def _stop(engine: RealEngine) -> None:
    if engine.sidecar is not None:
        engine.sidecar.stop()
    if engine.relay is not None:
        engine.relay.shutdown()
        engine.relay.server_close()
    engine.process.stop()
