"""The exporter at work inside an engine process: sampling threads, publishing, serving.

:func:`arm` is what the engine hooks call in every process the engine starts. It only starts one
watcher thread, which waits until the process has bound an NPU (torch_npu imported *by the engine*
and its runtime initialized) and then starts an :class:`Exporter` there. Processes that never bind
a device (API server, tokenizer, detokenizer) keep an idle watcher and export nothing.

An :class:`Exporter` runs three daemon threads, all off the engine's serving path:

- ``torch_npu``: every interval, the allocator statistics of the devices this process uses;
- ``npu_smi``: every interval, AICore utilization and HBM of the same devices;
- ``port``: until it succeeds, an attempt to bind the port; the winner serves every process's records.

After each sample the process rewrites its record in the pod's spool directory.

Where the engine's environment has no torch_npu at all (a host without NPUs, such as vLLM's CPU build),
:func:`arm` starts an exporter without collectors instead: its processes race for the port as usual, and
the winner says so once and serves only ``ascend_fleet_exporter_info{backend="none"}``.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType

from ascend_fleet_exporter import server as http
from ascend_fleet_exporter.allocator import AllocatorStats
from ascend_fleet_exporter.collectors import (
    CollectorUnavailable,
    NpuSmi,
    StatsProvider,
    TorchNpuStats,
    read_allocator,
)
from ascend_fleet_exporter.config import (
    METRICS_PATH,
    ExporterConfig,
    exporter_enabled,
    parse_visible_devices,
    pod_device,
)
from ascend_fleet_exporter.door import SnapshotDoor
from ascend_fleet_exporter.metrics import (
    BACKEND_NONE,
    COLLECTOR_NPU_SMI,
    COLLECTOR_TORCH_NPU,
    EXPORTER_INFO,
    render_exposition,
)
from ascend_fleet_exporter.records import ProcessRecord, TimedUsage, merge
from ascend_fleet_exporter.snapshot import NO_TORCH_NPU, Answer, SnapshotTaker, listing, request_snapshot
from ascend_fleet_exporter.spool import read_records, remove_record, write_record

_log = logging.getLogger("ascend_fleet_exporter")

_WATCH_POLL_SECONDS = 1.0
_SERVE_POLL_SECONDS = 0.2


class ProblemLog:
    """Logs each distinct problem line at most once per ``repeat_after`` seconds.

    A broken value is seen at every sample; one warning says it, a flood would bury the engine's log.
    """

    def __init__(
        self,
        log: logging.Logger,
        repeat_after: float = 600.0,
        limit: int = 512,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._repeat_after = repeat_after
        self._limit = limit
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def warn(self, lines: Iterable[str]) -> None:
        """Log the lines not logged within the last ``repeat_after`` seconds."""
        now = self._clock()
        for line in lines:
            with self._lock:
                last = self._last.get(line)
                if last is not None and now - last < self._repeat_after:
                    continue
                if len(self._last) >= self._limit:
                    self._last.clear()
                self._last[line] = now
            self._log.warning("%s", line)


class Exporter:
    """The exporter of one engine process; see the module docstring."""

    def __init__(
        self,
        config: ExporterConfig,
        stats: StatsProvider | None,
        npu_smi: NpuSmi | None,
        visible: list[int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.pid = os.getpid()
        self._stats = stats
        self._visible = visible
        self._npu_smi = npu_smi
        self._clock = clock
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: http.MetricsServer | None = None
        self._problems = ProblemLog(_log)
        self._told_port_taken = False
        # Devices this process uses, by its own ids (``_owned``) and by the container's (``_devices``);
        # ``None`` when no allocator can tell (torch_npu missing): npu-smi then reports every device.
        self._owned: set[int] = set()
        self._devices: set[int] | None = set() if stats is not None else None
        self._allocator: dict[str, AllocatorStats] = {}
        self._usage: dict[str, TimedUsage] = {}
        self._errors: dict[str, int] = {}
        self._live = {
            name
            for name, collector in ((COLLECTOR_TORCH_NPU, stats), (COLLECTOR_NPU_SMI, npu_smi))
            if collector
        }
        # Memory snapshots on demand, in processes whose allocator torch_npu reads (see snapshot.py).
        # Off unless ASCEND_FLEET_EXPORTER_SNAPSHOTS asks for them: then no request is read, none served.
        self._snapshots = (
            SnapshotTaker(config.spool, self.pid, config.snapshot_keep, config.snapshot_max_bytes)
            if stats is not None and config.snapshots
            else None
        )
        if stats is not None:
            self._errors[COLLECTOR_TORCH_NPU] = 0
        if npu_smi is not None:
            self._errors[COLLECTOR_NPU_SMI] = 0

    @property
    def backend(self) -> str:
        """What this exporter reads NPUs through: torch_npu, else npu-smi, else none (the info series' label)."""
        with self._lock:
            live = set(self._live)
        return next((name for name in (COLLECTOR_TORCH_NPU, COLLECTOR_NPU_SMI) if name in live), BACKEND_NONE)

    @property
    def serving(self) -> bool:
        """Whether this process holds the port."""
        return self._server is not None

    def start(self) -> Exporter:
        """Start the sampling and port threads; returns ``self``."""
        steps: list[tuple[str, Callable[[], bool]]] = [("port", self._claim_port)]
        if self._stats is not None:
            steps.append((COLLECTOR_TORCH_NPU, self._sample_allocator))
        if self._npu_smi is not None:
            steps.append((COLLECTOR_NPU_SMI, self._sample_usage))
        for name, step in steps:
            thread = threading.Thread(
                target=self._every_interval, args=(step,), daemon=True, name=f"ascend-fleet-exporter-{name}"
            )
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self) -> None:
        """Stop the threads, release the port and withdraw this process's record."""
        self._stopping.set()
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self.withdraw()

    def withdraw(self) -> None:
        """Remove this process's record so that the server drops its devices right away."""
        if os.getpid() == self.pid:  # an inherited atexit hook in a forked child must not do it
            remove_record(self.config.spool, self.pid)

    def abandon(self) -> None:
        """In a forked child: close the inherited listening socket, so only the parent holds the port."""
        if self._server is not None:
            self._server.socket.close()
            self._server = None

    def render(self) -> str:
        """The exposition text of every live process of the pod: what ``/metrics`` serves."""
        spooled = read_records(self.config.spool, now=self._clock())
        self._problems.warn(spooled.problems)
        snapshot = merge(spooled.records)
        return render_exposition(snapshot.devices, snapshot.scrape_errors, backend=self.backend)

    def snapshots(self, method: str) -> Answer:
        """``/memory-snapshot``: POST asks every engine process of the pod for one, GET lists the files."""
        with self._lock:
            has_torch_npu = COLLECTOR_TORCH_NPU in self._live
        if not has_torch_npu:
            return Answer(501, NO_TORCH_NPU + "\n")
        if method == "POST":
            return request_snapshot(self.config.spool, self.config.interval, keep=self.config.snapshot_keep)
        return listing(self.config.spool)

    def _every_interval(self, step: Callable[[], bool]) -> None:
        while not self._stopping.is_set():
            try:
                if not step():
                    return
            except Exception:  # a sampling bug must cost a sample, never the engine
                _log.exception("NPU exporter step failed; retrying in %s s", self.config.interval)
            if self._stopping.wait(self.config.interval):
                return

    def _sample_allocator(self) -> bool:
        assert self._stats is not None
        try:
            reading = read_allocator(self._stats, self._owned)
        except CollectorUnavailable as error:
            return self._collector_unavailable(COLLECTOR_TORCH_NPU, error)
        self._problems.warn(reading.problems)
        if self._snapshots is not None and self._owned:
            written = self._snapshots.take_if_requested()
            if written is not None:
                _log.info("NPU exporter: memory snapshot of process %d in %s", self.pid, written)
        with self._lock:
            self._devices = {pod_device(device, self._visible) for device in self._owned}
            self._allocator = {
                str(pod_device(device, self._visible)): stats for device, stats in reading.values.items()
            }
            self._errors[COLLECTOR_TORCH_NPU] += reading.failed
        self._publish()
        return True

    def _sample_usage(self) -> bool:
        assert self._npu_smi is not None
        with self._lock:
            devices = None if self._devices is None else sorted(self._devices)
        if devices == []:
            return True  # the engine has not touched a device yet
        try:
            reading = self._npu_smi.read(devices)
        except CollectorUnavailable as error:
            return self._collector_unavailable(COLLECTOR_NPU_SMI, error)
        self._problems.warn(reading.problems)
        sampled_at = self._clock()
        with self._lock:
            self._usage = {
                str(device): TimedUsage(sampled_at, usage) for device, usage in reading.values.items()
            }
            self._errors[COLLECTOR_NPU_SMI] += reading.failed
        self._publish()
        return True

    def _collector_unavailable(self, collector: str, error: CollectorUnavailable) -> bool:
        _log.warning("NPU exporter: %s", error)
        with self._lock:
            self._errors[collector] += 1
            self._live.discard(collector)
            if collector == COLLECTOR_TORCH_NPU:
                self._devices = None
        self._publish()
        return False

    def _publish(self) -> None:
        with self._lock:
            record = ProcessRecord(
                pid=self.pid,
                written_at=self._clock(),
                interval=self.config.interval,
                allocator=dict(self._allocator),
                usage=dict(self._usage),
                errors=dict(self._errors),
            )
            try:
                write_record(self.config.spool, record)
            except OSError as error:
                self._problems.warn([f"cannot publish NPU samples to {self.config.spool}: {error}"])

    def _claim_port(self) -> bool:
        try:
            snapshots = self.snapshots if self.config.snapshots else None  # off: /memory-snapshot is a 404
            door = SnapshotDoor(self.config.snapshot_token_file)
            server = http.bind(self.config.port, self.render, snapshots, door)
        except OSError as error:
            self._problems.warn([f"cannot listen on port {self.config.port}: {error}"])
            return True
        if server is None:
            if not self._told_port_taken and self.backend != BACKEND_NONE:
                self._told_port_taken = True
                _log.info(
                    "NPU exporter: port %d is taken, normally by another engine process of this pod "
                    "that serves all of them; taking over if it goes away",
                    self.config.port,
                )
            return True
        with self._lock:
            if self._stopping.is_set():
                server.server_close()
                return False
            self._server = server
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _SERVE_POLL_SECONDS},
            name="ascend-fleet-exporter-http",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()
        if self.backend == BACKEND_NONE:
            # A warning: it shows under any host's logging, and an NPU pod without torch_npu is a broken image.
            _log.warning(
                "NPU exporter: torch_npu is not installed in this engine's environment, so there is no NPU "
                'to read; port %d%s serves only %s{backend="%s"}',
                self.config.port,
                METRICS_PATH,
                EXPORTER_INFO,
                BACKEND_NONE,
            )
        else:
            _log.info(
                "NPU exporter: serving this pod's NPU metrics on port %d%s", self.config.port, METRICS_PATH
            )
        return False


_lock = threading.Lock()
_armed_pid: int | None = None
_active: Exporter | None = None
_fork_hook_installed = False


def start_exporter(
    config: ExporterConfig | None = None, stats: StatsProvider | None = None, npu_smi: NpuSmi | None = None
) -> Exporter:
    """Start the exporter in this process, or return the one already running here.

    Defaults: settings from the environment, allocator statistics from torch_npu (imported now if
    the engine has not, with a clear warning when it is missing), usage from ``npu-smi`` on ``PATH``.
    Device ids are the container's: a process narrowed by ``ASCEND_RT_VISIBLE_DEVICES`` is translated.
    """
    global _active
    with _lock:
        if _active is not None and _active.pid == os.getpid():
            if _active.backend != BACKEND_NONE:
                return _active
            _active.stop()  # an exporter with collectors replaces the one that only said "no NPU"
        config = config or ExporterConfig.from_env()
        stats = stats if stats is not None else TorchNpuStats()
        npu_smi = (
            npu_smi if npu_smi is not None else NpuSmi(config.npu_smi, timeout=max(config.interval, 10.0))
        )
        visible = parse_visible_devices(os.environ.get("ASCEND_RT_VISIBLE_DEVICES"))
        _active = Exporter(config, stats, npu_smi, visible).start()
        atexit.register(_active.withdraw)
        _install_fork_hook()
        return _active


def arm(environ: Mapping[str, str] | None = None) -> bool:
    """Start the exporter in this process once it binds an NPU, if ``ASCEND_FLEET_EXPORTER`` is on.

    Cheap and idempotent: at most one watcher thread per process. Returns whether the exporter is
    enabled. See the module docstring.
    """
    global _armed_pid
    if not exporter_enabled(environ):
        return False
    with _lock:
        if _armed_pid == os.getpid():
            return True
        _armed_pid = os.getpid()
    config = ExporterConfig.from_env(environ)
    show_in_engine_output(_log)
    threading.Thread(
        target=_start_when_device_bound, args=(config,), daemon=True, name="ascend-fleet-exporter-watch"
    ).start()
    _install_fork_hook()
    return True


def is_armed() -> bool:
    """Whether :func:`arm` has started a watcher in this very process."""
    return _armed_pid == os.getpid()


def bound_torch_npu() -> ModuleType | None:
    """torch_npu, if the engine imported it and initialized the NPU runtime here; never imports it."""
    module = sys.modules.get("torch_npu")
    is_initialized = getattr(getattr(module, "npu", None), "is_initialized", None)
    if is_initialized is None:
        return None  # not imported, or still being imported
    try:
        return module if is_initialized() else None
    except Exception:
        return None


def torch_npu_installed() -> bool:
    """Whether this Python environment has torch_npu at all; never imports it."""
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        return False


def start_without_npu(config: ExporterConfig) -> Exporter:
    """An exporter without collectors in this process (no torch_npu here), unless one already runs."""
    global _active
    with _lock:
        if _active is not None and _active.pid == os.getpid():
            return _active
        _active = Exporter(config, stats=None, npu_smi=None).start()
        atexit.register(_active.withdraw)
        _install_fork_hook()
        return _active


def show_in_engine_output(log: logging.Logger) -> None:
    """Give the exporter's log lines a way to the engine's stderr when nothing else would show them.

    vLLM configures only its own ``vllm`` logger, so without a handler the INFO lines would be dropped; a host
    that configures logging (a root handler, as pytest's) keeps its own routing.
    """
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    if log.hasHandlers():
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(name)s] %(message)s"))
    log.addHandler(handler)
    log.propagate = False  # a root handler the engine adds later must not print each line twice


def _start_when_device_bound(config: ExporterConfig) -> None:
    if not torch_npu_installed():
        start_without_npu(config)
        return
    while (module := bound_torch_npu()) is None:
        time.sleep(min(_WATCH_POLL_SECONDS, config.interval))
    start_exporter(config, stats=TorchNpuStats(module))


def _install_fork_hook() -> None:
    global _fork_hook_installed
    if not _fork_hook_installed:
        _fork_hook_installed = True
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    """A forked child inherits this module's state but none of its threads; start it afresh.

    It must let go of the parent's listening socket: a child holding it would keep the port busy
    after the parent died, and no sibling could take over.
    """
    global _lock, _active, _armed_pid
    _lock = threading.Lock()  # another thread may have held it at the moment of the fork
    parent, was_armed = _active, _armed_pid is not None
    _active, _armed_pid = None, None
    if parent is not None:
        parent.abandon()
    if was_armed:
        arm()
