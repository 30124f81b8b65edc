"""Simulated engine pods: one small HTTP server per running engine pod, exporting what a real one does.

The kubelet simulator calls :meth:`SimulatedEngines.on_pod_running` and
:meth:`SimulatedEngines.on_pod_stopped`. Each running engine pod gets a server on its pod IP (a
loopback address) and exporter port, serving ``GET /metrics`` and ``GET /health``:

- per device (label ``device``): the ``ascend_fleet_*`` metrics, rendered by the real exporter's code;
- on the leader (rank 0): the engine's own metrics, vLLM's or SGLang's, by the pod's command.

The leader also serves the OpenAI API on its pod IP and ``--port`` (see
:mod:`~ascend_fleet_dev.fleet.serving`): a continuously batching engine that follows the batch curve
and the limits on the pod's command line. Values come from a
:class:`~ascend_fleet_dev.fleet.scenario.Scenario`, sampled at each scrape, except that while real
requests arrive the engine's own running/waiting/KV-cache/utilization figures replace the scenario's. An
attached :class:`~ascend_fleet_dev.fleet.prometheus.PrometheusServer` gets one file_sd target
per pod, labelled with ``namespace``, ``inference``, ``replica``, ``rank`` and ``pod``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol, Self

from aiohttp import web
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ascend_fleet_dev.fleet.chips import core_readings
from ascend_fleet_dev.fleet.enginepods import (
    FALLBACK_HOST,
    EnginePod,
    engine_pod,
    ready_replicas,
    scrape_target,
)
from ascend_fleet_dev.fleet.openai import openai_app
from ascend_fleet_dev.fleet.prometheus import Target
from ascend_fleet_dev.fleet.scenario import EngineSample, Scenario
from ascend_fleet_dev.fleet.serving import (
    BatchingEngine,
    EngineConfig,
    dialect_of,
    engine_metrics,
    imitated_facts,
    series_labels,
)
from ascend_fleet_exporter.metrics import (
    COLLECTOR_NPU_SMI,
    COLLECTOR_TORCH_NPU,
    CONTENT_TYPE,
    DeviceSample,
    render_exposition,
)

_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
_SERVER_TIMEOUT = 10.0
DEFAULT_GRACE_SECONDS = 30  # a pod's terminationGracePeriodSeconds when it sets none (Kubernetes' default)
MAX_GRACE_SECONDS = 30  # the longest a stopping engine may finish its requests here
# A healthy real exporter reports both of its collectors with no errors.
_HEALTHY_COLLECTORS = {COLLECTOR_TORCH_NPU: 0, COLLECTOR_NPU_SMI: 0}


class TargetSink(Protocol):
    """Where scrape targets go; a :class:`~ascend_fleet_dev.fleet.prometheus.PrometheusServer` is one."""

    def set_targets(self, targets: Iterable[Target]) -> None: ...


# Rendering metrics ----------------------------------------------------------------------------


def device_samples(pod: EnginePod, sample: EngineSample) -> dict[str, DeviceSample]:
    """The exporter's per-device values for one sample: every device of a pod reports alike."""
    device = DeviceSample(
        utilization_ratio=sample.utilization,
        hbm_used_bytes=sample.hbm_used_bytes,
        hbm_total_bytes=sample.hbm_total_bytes,
        fragmentation_ratio=sample.fragmentation,
        slack_ratio=sample.slack,
        reserved_bytes=sample.reserved_bytes,
        allocated_bytes=sample.allocated_bytes,
        alloc_retries=sample.alloc_retries,
        ooms=0,
        # The idle cache outside split blocks, as one block: it shrinks as fragmentation and load grow.
        largest_free_block_bytes=sample.reserved_bytes * max(sample.slack - sample.fragmentation, 0.0),
        aicube_ratio=sample.cores.aicube,
        aivector_ratio=sample.cores.aivector,
        aicpu_ratio=sample.cores.aicpu,
        hbm_bandwidth_ratio=sample.cores.hbm_bandwidth,
    )
    return {str(index): device for index in range(pod.devices)}


def queue_families(pod: EnginePod, sample: EngineSample) -> list[Metric]:
    """The engine's own queue and KV-cache gauges, named and labelled as vLLM or SGLang does."""
    facts = imitated_facts(pod.engine)
    series = facts.metrics
    names = tuple(
        _bare(name) for name in (series.running_requests, series.queue_depth, series.kv_cache_usage)
    )
    labels = series_labels(dialect_of(pod.engine), pod.model_name)
    values = (sample.requests_running, sample.requests_waiting, sample.kv_cache_usage)
    helps = ("Requests running on the engine.", "Requests waiting in the queue.", "KV-cache usage, 0..1.")
    families: list[Metric] = []
    for name, documentation, value in zip(names, helps, values, strict=True):
        family = GaugeMetricFamily(name, documentation, labels=list(labels))
        family.add_metric(list(labels.values()), value)
        families.append(family)
    return families


def _bare(selector: str) -> str:
    """A series name without the label matchers the catalog selects it by."""
    return selector.split("{", 1)[0]


def render_metrics(pod: EnginePod, sample: EngineSample, engine: BatchingEngine | None = None) -> bytes:
    """What a pod serves on ``/metrics`` (text format 0.0.4): the exporter's gauges, then the engine's.

    The exporter part comes from the real exporter's renderer, so simulated and real names cannot drift.
    ``engine`` adds the serving engine's counters and histograms (requests it has served).
    """
    exporter = render_exposition(device_samples(pod, sample), scrape_errors=_HEALTHY_COLLECTORS)
    return exporter.encode() + render_engine_metrics(pod, sample, engine)


def render_engine_metrics(
    pod: EnginePod, sample: EngineSample, engine: BatchingEngine | None = None
) -> bytes:
    """The engine's own families (leaders only): queue gauges, then request counters and histograms."""
    if not pod.leader or pod.npu_only:
        return b""
    gauges = generate_latest(_Families(queue_families(pod, sample)))
    return gauges + (engine_metrics(engine) if engine is not None else b"")


def with_real_traffic(
    sample: EngineSample, engine: BatchingEngine | None, *, utilization: bool = True
) -> EngineSample:
    """``sample`` with the serving engine's own figures while real requests drive it.

    With ``utilization=False`` the NPU utilization stays the scenario's (the demo's story runs on it, the
    routed requests come on top); the queue and KV-cache gauges the picker reads are the engine's."""
    if engine is None or not engine.serving_real_traffic():
        return sample
    running, waiting, kv_usage, busy = engine.snapshot()
    if not utilization:
        return replace(sample, requests_running=running, requests_waiting=waiting, kv_cache_usage=kv_usage)
    return replace(
        sample,
        requests_running=running,
        requests_waiting=waiting,
        kv_cache_usage=kv_usage,
        utilization=busy,
        # The core types and HBM bandwidth follow the engine's own load, as its AI Core figure does.
        cores=core_readings(sample.chip, busy),
    )


class _Families:
    """A collector that yields a fixed list of families (one per scrape)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self._families)


# Serving --------------------------------------------------------------------------------------


class SimulatedEngines:
    """HTTP servers for running engine pods, fed by a scenario; a listener of the kubelet simulator.

    All servers share one asyncio loop on a background thread. Methods are thread-safe and
    idempotent: a pod reported running twice (watches replay) keeps its server and its age.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        prometheus: TargetSink | None = None,
        clock: Callable[[], float] = time.time,
        start_scenario: bool = True,
        curve: Any = None,
        traffic_utilization: bool = True,
        served_elsewhere: Callable[[Mapping[str, Any]], bool] | None = None,
        npu_for_real: bool = False,
    ) -> None:
        """Serve pods with values from ``scenario`` and keep ``prometheus``'s targets in sync.

        With ``start_scenario`` the scenario's time zero is now, so its timeline starts with the engines.
        ``curve`` (a :class:`~ascend_fleet.simulate.curve.BatchCurve`) replaces the seeds' batch curve of
        every serving engine. ``traffic_utilization=False`` keeps the scenario's NPU utilization while requests
        are served (:func:`with_real_traffic`). Pods ``served_elsewhere`` claims (real engines) are left alone, or
        with ``npu_for_real`` get only the scenario's NPU series, on a port of 127.0.0.1 (a second scrape target).
        """
        self.scenario = scenario
        self.curve = curve
        self.traffic_utilization = traffic_utilization
        self.served_elsewhere = served_elsewhere
        self.npu_for_real = npu_for_real
        self.prometheus = prometheus
        self._clock = clock
        self._lock = threading.Lock()
        # Replaced, never mutated: request handlers on the loop thread read it without the lock.
        self._pods: dict[tuple[str, str], EnginePod] = {}
        self._runners: dict[tuple[str, str], list[web.AppRunner]] = {}
        self._engines: dict[tuple[str, str], BatchingEngine] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="simulated-engines", daemon=True)
        self._thread.start()
        self._closed = False
        if start_scenario:
            scenario.start(clock())
        self._sync_targets()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def on_pod_running(self, pod: Mapping[str, Any]) -> None:
        """Serve metrics for a pod that started running (pods without the inference label are ignored)."""
        engine = engine_pod(pod, self._clock())
        if engine is not None and self.served_elsewhere is not None and self.served_elsewhere(pod):
            engine = replace(engine, ip="", api_port=None, npu_only=True) if self.npu_for_real else None
        if engine is None:
            return
        with self._lock:
            if self._closed:
                return
            current = self._pods.get(engine.key)
            if current is not None and current.uid == engine.uid:
                return
            if current is not None:
                self._stop_server(current.key)
            serving = self._start_server(engine)
            self._pods = {**self._pods, serving.key: serving}
            self._sync_targets()

    def on_pod_stopped(self, pod: Mapping[str, Any]) -> None:
        """Stop serving a pod that stopped or was deleted."""
        metadata = pod.get("metadata") or {}
        key = (metadata.get("namespace") or "default", metadata.get("name", ""))
        uid = metadata.get("uid")
        with self._lock:
            current = self._pods.get(key)
            # A late stop of an earlier pod with the same name must not stop its replacement.
            if current is None or (uid and current.uid and uid != current.uid):
                return
            engine = self._engines.get(key)
        if engine is not None and metadata.get("deletionTimestamp"):
            # A deleted pod's engine gets its grace period to finish what it serves, as a kubelet's SIGTERM
            # gives a real one (the drained replica left the Service and the picker before); a pod that failed
            # or whose node died stops at once.
            self._run(engine.drain(_grace_seconds(pod)), timeout=_grace_seconds(pod) + _SERVER_TIMEOUT)
        with self._lock:
            if self._pods.get(key) is not current:
                return  # replaced or closed while it drained
            self._stop_server(key)
            self._pods = {k: v for k, v in self._pods.items() if k != key}
            self._sync_targets()

    def pods(self) -> list[EnginePod]:
        """The engine pods being served."""
        return list(self._pods.values())

    def endpoint(self, namespace: str, name: str) -> str | None:
        """``host:port`` of a pod's metrics server, or ``None`` if the pod is not served."""
        pod = self._pods.get((namespace, name))
        return pod.address if pod else None

    def api_endpoint(self, namespace: str, name: str) -> str | None:
        """``host:port`` of a leader's OpenAI API, or ``None`` if the pod serves none."""
        pod = self._pods.get((namespace, name))
        return pod.api_address if pod else None

    def engine(self, namespace: str, name: str) -> BatchingEngine | None:
        """The serving engine of a leader pod (for tests and the dev UI), or ``None``."""
        return self._engines.get((namespace, name))

    def targets(self) -> list[Target]:
        """One scrape target per served pod."""
        return [scrape_target(pod) for pod in sorted(self._pods.values(), key=lambda pod: pod.key)]

    def sample(self, namespace: str, name: str) -> EngineSample | None:
        """What a pod would export right now, or ``None`` if it is not served."""
        pods = self._pods
        pod = pods.get((namespace, name))
        return None if pod is None else self._sample(pods, pod)

    def close(self) -> None:
        """Stop every server and the loop; the attached Prometheus is left with no targets."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for key in list(self._runners):
                self._stop_server(key)
            self._pods = {}
            self._sync_targets()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_SERVER_TIMEOUT)
        self._loop.close()

    def _sync_targets(self) -> None:
        if self.prometheus is not None:
            self.prometheus.set_targets(self.targets())

    def _start_server(self, pod: EnginePod) -> EnginePod:
        """Serve ``pod`` on its IP and ports, else on free ports of 127.0.0.1; return where it listens.

        Every pod serves metrics; a leader whose command names a ``--port`` also serves the OpenAI API.
        """
        app = web.Application()
        app.router.add_get("/metrics", self._metrics_handler(pod.key, with_exporter=True))
        app.router.add_get("/health", _health)
        runner, pod = self._bind(app, pod, pod.port, lambda p, port: replace(p, port=port))
        self._runners[pod.key] = [runner]
        if pod.leader and pod.api_port:
            config = pod.engine_config()
            if self.curve is not None:
                config = replace(config, curve=self.curve)
            engine = self._run(_create_engine(config))
            self._engines[pod.key] = engine
            api = openai_app(engine, self._metrics_handler(pod.key, with_exporter=False))
            runner, pod = self._bind(api, pod, pod.api_port, lambda p, port: replace(p, api_port=port))
            self._runners[pod.key].append(runner)
        return pod

    def _bind(
        self, app: web.Application, pod: EnginePod, port: int, moved: Callable[[EnginePod, int], EnginePod]
    ) -> tuple[web.AppRunner, EnginePod]:
        """Listen on the pod's IP and ``port``, else on a free port of 127.0.0.1 (``moved`` records it)."""
        if _is_loopback(pod.ip):
            try:
                return self._run(_serve(app, pod.ip, port)), pod
            except OSError:
                pass  # Address taken or not configured: fall through to a port of our own.
        runner = self._run(_serve(app, FALLBACK_HOST, 0))
        host, bound = runner.addresses[0][:2]
        return runner, moved(replace(pod, ip=host), bound)

    def _stop_server(self, key: tuple[str, str]) -> None:
        engine = self._engines.pop(key, None)
        if engine is not None:
            self._run(engine.close())
        for runner in self._runners.pop(key, []):
            self._run(runner.cleanup())

    def _sample(self, pods: Mapping[tuple[str, str], EnginePod], pod: EnginePod) -> EngineSample:
        ready = ready_replicas(pods.values(), pod.namespace, pod.inference)
        sample = self.scenario.sample(
            self._clock(), pod.namespace, pod.inference, pod.replica, pod.started_at, ready
        )
        return with_real_traffic(sample, self._engines.get(pod.key), utilization=self.traffic_utilization)

    def _metrics_handler(self, key: tuple[str, str], *, with_exporter: bool) -> Callable[[web.Request], Any]:
        async def metrics(request: web.Request) -> web.Response:
            pods = self._pods
            pod = pods.get(key)
            if pod is None:
                raise web.HTTPNotFound()
            sample, engine = self._sample(pods, pod), self._engines.get(key)
            if with_exporter:
                body = render_metrics(pod, sample, engine)
            else:
                body = render_engine_metrics(pod, sample, engine)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

        return metrics

    def _run(self, coroutine: Coroutine[Any, Any, Any], timeout: float = _SERVER_TIMEOUT) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)


def _grace_seconds(pod: Mapping[str, Any]) -> float:
    """The pod's termination grace period (Kubernetes' default when it names none), capped for the dev cluster."""
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(
        min(grace if isinstance(grace, int) and grace >= 0 else DEFAULT_GRACE_SECONDS, MAX_GRACE_SECONDS)
    )


async def _serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    # Scrapes finish in milliseconds; a short shutdown keeps a pod's stop from waiting on keep-alives.
    # A client that goes away cancels its handler, so the engine frees the slot as a real engine does.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def _create_engine(config: EngineConfig) -> BatchingEngine:
    """An engine created on the serving loop, which runs its batching."""
    return BatchingEngine(config)


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _is_loopback(ip: str) -> bool:
    """Only 127.0.0.0/8 may be bound: the simulation must never listen on a real network."""
    try:
        return ipaddress.ip_address(ip) in _LOOPBACK
    except ValueError:
        return False
