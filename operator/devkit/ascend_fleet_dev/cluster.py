"""``DevCluster``: the local Kubernetes API and the kubelet simulator, served from a background thread.

One thread owns one asyncio loop that runs kmock's :class:`kmock.Server` with a
:class:`~ascend_fleet_dev.emulator.apiserver.LocalKubernetes` emulator and a
:class:`~ascend_fleet_dev.fleet.kubelet.KubeletSimulator`. The context manager is synchronous, so the same
object serves pytest fixtures and the ``ascend-fleet dev-cluster`` command (:func:`serve`)::

    with DevCluster(start_seconds=0.2) as cluster:
        subprocess.run(["kubectl", "--kubeconfig", cluster.kubeconfig_path, "get", "pods", "-A"])

Note: kmock's server hooks aiohttp's host resolution for the whole process while it runs (it only redirects
its own host:port). Two clusters in one process must therefore stop in the reverse order of their start.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import kmock
import yaml

from ascend_fleet.kube import Kube
from ascend_fleet.kube.client import USER_AGENT
from ascend_fleet_dev.emulator.apiserver import KUBE_VERSION, LocalKubernetes
from ascend_fleet_dev.fleet.kubelet import KubeletSimulator
from ascend_fleet_dev.local.crds import install_crd

EMULATOR_CONTEXT = "ascend-fleet-dev"
_STARTUP_TIMEOUT = 30.0
_T = TypeVar("_T")


def kubeconfig_for(url: str, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig for a server without authentication: cluster, user and context ``ascend-fleet-dev``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": EMULATOR_CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": EMULATOR_CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": EMULATOR_CONTEXT,
                "context": {"cluster": EMULATOR_CONTEXT, "user": EMULATOR_CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": EMULATOR_CONTEXT,
        "preferences": {},
    }


class DevCluster:
    """A running local cluster: API server + kubelet simulator. Use it as a context manager.

    ``port=0`` picks a free port. ``kubeconfig`` is where :attr:`kubeconfig_path` is written on start (a
    temporary file, removed on exit, when not given). Other arguments go to the simulator and emulator.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        kubeconfig: str | Path | None = None,
        start_seconds: float = 1.0,
        ready_seconds: float = 1.0,
        nodes: int = 4,
        request_log_limit: int | None = None,
        kube_version: str = KUBE_VERSION,
    ) -> None:
        self.host = host
        self.kube_version = kube_version
        self.port = port
        self.start_seconds = start_seconds
        self.ready_seconds = ready_seconds
        self.nodes = nodes
        self.request_log_limit = request_log_limit
        self._kubeconfig = Path(kubeconfig) if kubeconfig else None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._url: str | None = None
        self._emulator: LocalKubernetes | None = None
        self._kubelet: KubeletSimulator | None = None
        self.kubeconfig_path: Path | None = None

    @property
    def url(self) -> str:
        """The API server's URL, e.g. ``http://127.0.0.1:41234``."""
        if self._url is None:
            raise RuntimeError("the dev cluster is not running")
        return self._url

    @property
    def emulator(self) -> LocalKubernetes:
        """The kmock emulator (its DSL, ``objects``, ``store``); use the store via :meth:`call`."""
        if self._emulator is None:
            raise RuntimeError("the dev cluster is not running")
        return self._emulator

    @property
    def kubelet(self) -> KubeletSimulator:
        """The kubelet simulator (its test controls are thread-safe)."""
        if self._kubelet is None:
            raise RuntimeError("the dev cluster is not running")
        return self._kubelet

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig for this cluster to ``path``; it becomes :attr:`kubeconfig_path`."""
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(kubeconfig_for(self.url), sort_keys=False))
        self.kubeconfig_path = path
        return path

    def call(self, work: Coroutine[Any, Any, _T] | Callable[[], _T], timeout: float = 30.0) -> _T:
        """Run a coroutine or a plain callable on the cluster's loop and return its result.

        The store is not thread-safe: this is how another thread reads or writes it directly, e.g.
        ``cluster.call(lambda: cluster.emulator.store.read_object("v1/pods", "p", "default"))``.
        """
        coroutine = work if asyncio.iscoroutine(work) else _as_coroutine(work)
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("the dev cluster is not running")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def kube(self, user_agent: str = USER_AGENT) -> Kube:
        """A client of this cluster's administrator (through :attr:`kubeconfig_path`)."""
        if self.kubeconfig_path is None:
            raise RuntimeError("the cluster is not running")
        kube = Kube.connect(str(self.kubeconfig_path))
        kube.api.user_agent = user_agent
        return kube

    def install_crd(self, crd: Mapping[str, Any]) -> None:
        """Create ``crd`` (kept if it exists) and wait until its resource is served."""
        install_crd(self.kube(), crd)

    def start(self) -> Self:
        """Start the server thread and wait until the API answers; re-raises a startup failure."""
        if self._thread is not None:
            raise RuntimeError("a dev cluster can be started only once")
        self._thread = threading.Thread(target=self._run, name="ascend-fleet-dev-cluster", daemon=True)
        self._thread.start()
        if not self._started.wait(_STARTUP_TIMEOUT):
            raise TimeoutError("the dev cluster did not start in time")
        if self._failure is not None:
            self._thread.join()
            raise RuntimeError("the dev cluster failed to start") from self._failure
        self.write_kubeconfig(self._kubeconfig or self._temporary_kubeconfig())
        return self

    def stop(self) -> None:
        """Stop the kubelet, end the watches, close the server and join the thread (idempotent)."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop may have ended on its own
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(_STARTUP_TIMEOUT)
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _temporary_kubeconfig(self) -> Path:
        self._tempdir = tempfile.TemporaryDirectory(prefix="ascend-fleet-dev-")
        return Path(self._tempdir.name) / "kubeconfig"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # reported to the starting thread, which re-raises it
            self._failure = e
        finally:
            self._loop = None
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        emulator = LocalKubernetes(request_log_limit=self.request_log_limit, kube_version=self.kube_version)
        kubelet = KubeletSimulator(
            emulator.store,
            start_seconds=self.start_seconds,
            ready_seconds=self.ready_seconds,
            nodes=self.nodes,
        )
        async with emulator, kmock.Server(emulator, host=self.host, port=self.port) as server:
            await kubelet.start()
            try:
                self._emulator, self._kubelet = emulator, kubelet
                self._url = str(server.url).rstrip("/")
                self._started.set()
                await self._stop.wait()
            finally:
                await kubelet.stop()
                emulator.close_watches()  # or the server waits for every open watch before closing


async def _as_coroutine(function: Callable[[], _T]) -> _T:
    return function()
