"""The real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

The components are the upstream ones, built from the Kubernetes release's Go modules by ``tools/controlplane``
into one binary (``controlplane <component> [flags]``). :func:`ensure_binary` builds it once into a cache keyed
by the digest of its sources and the Go version, and reuses it while those are unchanged
(``make control-plane`` does the same). :class:`ControlPlane` runs one process per component:

- etcd (embedded etcd server, the version the release's etcd client is tested with), plain HTTP on loopback;
- kube-apiserver with TLS from locally generated certificates, client-certificate and service-account token
  authentication, RBAC authorization and the default admission plugins plus OwnerReferencesPermissionEnforcement;
- kube-controller-manager with its default controllers (garbage collector, disruption, namespace, service
  account and token, node lifecycle, ...), each under its own service account as kubeadm sets it up;
- kube-scheduler.

It has no kubelet and no kube-proxy: :class:`~ascend_fleet_dev.real.nodeagent.NodeAgent` plays the nodes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.local.process import LocalProcess
from ascend_fleet_dev.local.supervisor import Supervisor
from ascend_fleet_dev.real.kubeversions import DEFAULT_KUBE_MINOR, KUBE_MINORS, chosen_minor, minor_number

REAL_CONTEXT = "ascend-fleet-real"
SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTROL_PLANE_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# The components clients talk to (directly or through the API server): /readyz answers once they are back.
_STORAGE_AND_API = ("etcd", "kube-apiserver")


class ControlPlaneUnavailable(RuntimeError):
    """The control plane cannot be built or started here; the message says what is missing."""


# Building ---------------------------------------------------------------------------------------------


def source_dir() -> Path:
    """``tools/controlplane`` of the checkout this package runs from."""
    return Path(__file__).resolve().parents[4] / "tools" / "controlplane"


def cache_dir(name: str = "controlplane") -> Path:
    """Where built binaries are kept: ``$XDG_CACHE_HOME/ascend-fleet/<name>`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ascend-fleet" / name


def _go(what: str = "the real control plane") -> str:
    go = shutil.which("go")
    if go is None:
        raise ControlPlaneUnavailable(
            f"{what} is built from Go modules and needs the Go toolchain (1.24 or newer) on PATH"
        )
    return go


def source_digest(source: Path | None = None, what: str = "the real control plane") -> str:
    """A digest of the module's sources, its packages' included, and the Go version: a new digest means a new
    build. Files are named by their path in the module (a top-level file by its name, as before packages
    counted, so a module without packages keeps its digest)."""
    source = source or source_dir()
    digest = hashlib.sha256()
    for path in sorted(source.rglob("*")):
        if path.is_file() and (path.suffix in (".go", ".mod", ".sum", ".sh")):
            digest.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    version = subprocess.run(
        [_go(what), "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout
    digest.update(version.strip().encode())
    return digest.hexdigest()[:16]


def cached_go_build(
    source: Path,
    name: str,
    *,
    what: str,
    override_env: str,
    make_target: str,
    build: bool,
    progress: Any,
    minor: str | None = None,
) -> Path:
    """A binary built by ``source/build.sh``: ``$override_env``, else ``<cache>/<digest of source>/<name>``,
    built there when missing and ``build`` is true (``progress`` hears a line first). With ``minor`` (a
    Kubernetes minor such as ``1.30``) it is ``build.sh OUTPUT MINOR``, the module of ``source/kube-MINOR``,
    cached under ``<digest>-<minor>``. Raises :class:`ControlPlaneUnavailable` saying what is missing."""  # fmt: skip
    override = os.environ.get(override_env)
    if override:
        return Path(override)
    if not (source / "go.mod").is_file():
        raise ControlPlaneUnavailable(
            f"{what}'s Go module is not at {source}; set {override_env} to a built binary"
        )
    if minor is not None and not (source / f"kube-{minor}" / "go.mod").is_file():
        raise ControlPlaneUnavailable(
            f"{what} has no module for Kubernetes {minor} (kube-{minor}/ in {source})"
        )
    binary = cache_dir(name) / (source_digest(source, what) + (f"-{minor}" if minor else "")) / name
    if binary.is_file():
        return binary
    if not build:
        raise ControlPlaneUnavailable(f"{what} is not built yet ({binary}); run make {make_target}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    if progress is not None:
        progress(f"Building {what} from Go modules into {binary} (once) ...")
    argv = ["bash", str(source / "build.sh"), str(binary), *([minor] if minor else [])]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise ControlPlaneUnavailable(f"building {what} failed:\n{result.stderr[-4000:]}")
    return binary


def ensure_binary(*, build: bool = True, progress: Any = None, kube_version: str | None = None) -> Path:
    """The control plane binary: ``$ASCEND_FLEET_CONTROLPLANE``, else the cached build of the current sources
    of ``kube_version`` (:func:`~ascend_fleet_dev.real.kubeversions.chosen_minor`). A cold build downloads the
    modules and compiles a few thousand packages: minutes, see docs/real-cluster.md."""
    kube_version = chosen_minor(kube_version)
    minor = None if kube_version == DEFAULT_KUBE_MINOR else kube_version
    if minor is not None and minor not in KUBE_MINORS:
        raise ControlPlaneUnavailable(
            f"Kubernetes {minor} is not built here; choose one of {', '.join(KUBE_MINORS)}"
        )
    return cached_go_build(
        source_dir(), "controlplane", what=f"the Kubernetes {kube_version} control plane",
        override_env="ASCEND_FLEET_CONTROLPLANE", make_target="control-plane", build=build, progress=progress,
        minor=minor,
    )  # fmt: skip


# Running ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiServerAccess:
    """Where the API server is and how to reach it with a client certificate."""

    url: str
    ca: Path
    cert: Path
    key: Path

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context


def kubeconfig(url: str, ca: Path, user: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig with one cluster, one user (``client-certificate``/``client-key`` or ``token``), one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": REAL_CONTEXT, "cluster": {"server": url, "certificate-authority": str(ca)}}],
        "users": [{"name": REAL_CONTEXT, "user": user}],
        "contexts": [
            {
                "name": REAL_CONTEXT,
                "context": {"cluster": REAL_CONTEXT, "user": REAL_CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": REAL_CONTEXT,
        "preferences": {},
    }


# How long a node may miss its heartbeats before the node lifecycle controller marks it unreachable (upstream
# default 50 s). The dev cluster keeps its simulated nodes Ready through a short API outage with 90 s; a test
# of node failure starts a cluster of its own with less, as an operator of a failover-sensitive fleet would.
DEV_NODE_MONITOR_GRACE_SECONDS = 90
# How often that controller looks (upstream default 5 s): a death is seen within grace + period.
NODE_MONITOR_PERIOD_SECONDS = 1


class ControlPlane:
    """A running control plane in ``workdir`` (a temporary folder, removed on stop, when not given).

    Use it as a context manager. :attr:`admin` reaches it as a member of ``system:masters``;
    :meth:`write_kubeconfig` writes a kubeconfig for that user or for a bearer token.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        binary: Path | None = None,
        verbosity: int = 1,
        node_monitor_grace_seconds: int = DEV_NODE_MONITOR_GRACE_SECONDS,
        kube_version: str | None = None,
    ) -> None:
        self.binary = binary
        self.kube_version = chosen_minor(kube_version)
        self.node_monitor_grace_seconds = node_monitor_grace_seconds
        self.verbosity = verbosity
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self._workdir = Path(workdir) if workdir else None
        self._processes: dict[str, LocalProcess] = {}
        self.supervisor = Supervisor("control plane")
        self.etcd_port = 0
        self.port = 0
        self.timings: dict[str, float] = {}

    # Paths and credentials ----------------------------------------------------------------------------

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("the control plane is not running")
        return self._workdir

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin(self) -> ApiServerAccess:
        return self._credentials("admin")

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def _credentials(self, user: str) -> ApiServerAccess:
        return ApiServerAccess(
            self.url, self.pki / "ca.crt", self.pki / f"{user}.crt", self.pki / f"{user}.key"
        )

    def write_kubeconfig(
        self, path: str | Path, *, token: str | None = None, namespace: str = "default"
    ) -> Path:
        """A kubeconfig for the admin (default) or for a bearer ``token`` (a service account's, say)."""
        if token is not None:
            user: dict[str, Any] = {"token": token}
        else:
            user = {"client-certificate": str(self.admin.cert), "client-key": str(self.admin.key)}
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            yaml.safe_dump(kubeconfig(self.url, self.pki / "ca.crt", user, namespace), sort_keys=False)
        )
        path.chmod(0o600)
        return path

    def log(self, component: str) -> str:
        """The last part of a component's log, for error messages."""
        path = self.workdir / f"{component}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    # Lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start every component and wait until the API is ready and the controllers have done their first work."""
        if self._processes:
            raise RuntimeError("the control plane is running already")
        began = time.monotonic()
        if self.binary is None:
            self.binary = ensure_binary(kube_version=self.kube_version)
        if self._workdir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="ascend-fleet-cp-")
            self._workdir = Path(self._tempdir.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run([str(self.binary), "pki", "--dir", str(self.pki)], check=True, capture_output=True)
            self._start_storage_and_api()
            self.timings["apiserver"] = time.monotonic() - began
            self.write_kubeconfig(self.admin_kubeconfig)
            for component in ("kube-controller-manager", "kube-scheduler"):
                self._write_component_kubeconfig(component)
            self._spawn("kube-controller-manager", self._controller_manager_args())
            self._spawn("kube-scheduler", self._scheduler_args())
            self._wait_for_service_account("default", "default")
            self.timings["ready"] = time.monotonic() - began
            # Supervision starts once everything came up: a failed start is an error, not a restart loop.
            self.supervisor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_storage_and_api(self, attempts: int = 3) -> None:
        # A free port can be taken by another process between choosing it and binding it: choose again.
        for attempt in range(attempts):
            self.etcd_port, self.port = free_port(), free_port()
            self._spawn("etcd", self._etcd_args())
            self._spawn("kube-apiserver", self._apiserver_args())
            try:
                self.wait_ready()
                return
            except ControlPlaneUnavailable:
                taken = any("address already in use" in self.log(c) for c in ("etcd", "kube-apiserver"))
                if not taken or attempt == attempts - 1:
                    raise
                self._terminate("kube-apiserver")
                self._terminate("etcd")
                for component in ("etcd", "kube-apiserver"):
                    (self.workdir / f"{component}.log").write_text("")

    def stop(self) -> None:
        """Stop every component, newest first, and remove a temporary workdir (idempotent)."""
        self.supervisor.stop()
        for component in reversed(list(self._processes)):
            self._terminate(component)
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None
            self._workdir = None

    def restart_apiserver(self, downtime: float = 0.0) -> None:
        """Stop kube-apiserver, wait ``downtime`` seconds, start it again on the same port and wait until ready."""
        with self.outage("kube-apiserver"):
            time.sleep(downtime)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (clients then see connection refused until :meth:`start_apiserver`)."""
        self.stop_component("kube-apiserver")

    def start_apiserver(self) -> None:
        """Start a stopped kube-apiserver again and wait until it is ready."""
        self.start_component("kube-apiserver")

    def stop_component(self, component: str) -> None:
        """Stop one component (SIGTERM, reaped) and keep it stopped: the supervisor restarts it no more until
        :meth:`start_component`. For outage tests; a component that dies on its own is restarted."""
        if component not in self._processes:
            raise LookupError(
                f"no component {component!r}; the control plane runs {', '.join(self._processes)}"
            )
        self.supervisor.hold(component, grace=15)

    def start_component(self, component: str, *, wait: bool = True) -> None:
        """Start a component stopped by :meth:`stop_component`; with ``wait``, until the API answers ready."""
        self.supervisor.release(component)
        if wait and component in _STORAGE_AND_API and all(self.running(c) for c in _STORAGE_AND_API):
            self.wait_ready()

    @contextlib.contextmanager
    def outage(self, *components: str) -> Iterator[None]:
        """Stop ``components`` (kube-apiserver by default) for the block, then start them, last stopped
        first, and wait until the API is ready::

            with cluster.control_plane.outage("etcd"):
                time.sleep(30)
        """
        components = components or ("kube-apiserver",)
        stopped: list[str] = []
        try:
            for component in components:
                self.stop_component(component)
                stopped.append(component)
            yield
        finally:
            for component in reversed(stopped):
                self.start_component(component, wait=False)
            self.wait_ready()

    def pid(self, component: str) -> int | None:
        """The process id of a component's current (or last) process; None when it does not run here."""
        process = self._processes.get(component)
        return process.pid if process is not None else None

    def restarts(self, component: str) -> int:
        """How often a component was restarted by the supervisor after dying on its own."""
        return self.supervisor.restarts(component)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def running(self, component: str) -> bool:
        """Whether ``component``'s process runs (it may still be starting up)."""
        process = self._processes.get(component)
        return process is not None and process.running

    # Waiting --------------------------------------------------------------------------------------------

    def request(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """One GET as the admin: (status, body); status 0 when the server did not answer."""
        context = self.admin.ssl_context()
        try:
            with urllib.request.urlopen(self.url + path, context=context, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (OSError, urllib.error.URLError):
            return 0, b""

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait for ``/readyz`` to answer ok; raise with the API server's log if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for component in ("etcd", "kube-apiserver"):
                if not self.running(component):
                    raise ControlPlaneUnavailable(f"{component} exited:\n{self.log(component)}")
            status, body = self.request("/readyz", timeout=2.0)
            if status == 200 and body.strip() == b"ok":
                return
            time.sleep(0.2)
        raise ControlPlaneUnavailable(
            f"kube-apiserver was not ready after {timeout:.0f}s:\n{self.log('kube-apiserver')}"
        )

    def _wait_for_service_account(self, namespace: str, name: str, timeout: float = 120.0) -> None:
        # Pods are admitted only once their namespace's service account exists: the controller manager's sign
        # that it has started.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for component in ("kube-controller-manager", "kube-scheduler"):
                if not self.running(component):
                    raise ControlPlaneUnavailable(f"{component} exited:\n{self.log(component)}")
            status, _ = self.request(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
            if status == 200:
                return
            time.sleep(0.3)
        raise ControlPlaneUnavailable(
            f"no service account {namespace}/{name} after {timeout:.0f}s:\n{self.log('kube-controller-manager')}"
        )

    # Processes ------------------------------------------------------------------------------------------

    def _spawn(self, component: str, args: list[str]) -> None:
        self._processes[component] = LocalProcess(
            component,
            [str(self.binary), component, *args],
            cwd=self.workdir,
            log=self.workdir / f"{component}.log",
        ).start()
        self.supervisor.watch(self._processes[component])

    def _terminate(self, component: str) -> None:
        if self._processes.pop(component, None) is not None:
            self.supervisor.forget(component, grace=15)

    def _write_component_kubeconfig(self, component: str) -> None:
        credentials = self._credentials(component)
        user = {"client-certificate": str(credentials.cert), "client-key": str(credentials.key)}
        path = self.workdir / f"{component}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig(self.url, credentials.ca, user), sort_keys=False))

    def _etcd_args(self) -> list[str]:
        return [
            "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-url", f"http://127.0.0.1:{self.etcd_port}",
            "--listen-peer-url", f"http://127.0.0.1:{free_port()}",
        ]  # fmt: skip

    def _apiserver_args(self) -> list[str]:
        pki = self.pki
        return [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--advertise-address=127.0.0.1",
            # The `kubernetes` Service's endpoints would point at loopback, which Endpoints refuse.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki / 'service-account.key'}",
            f"--service-account-signing-key-file={pki / 'service-account.key'}",
            f"--api-audiences={ISSUER}",
            "--authorization-mode=RBAC",
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            # Bound pods carry their node's zone and region labels, as from Kubernetes 1.35 on (beta there; the
            # gate exists from 1.33): the operator reads a replica's zone from its pod, never from the Node.
            *(
                ["--feature-gates=PodTopologyLabelsAdmission=true"]
                if minor_number(self.kube_version) >= 33
                else []
            ),
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cert-dir={self.workdir / 'certs'}",
            # Who asked for what (kept as metadata only): tests read it to check RBAC grants against use.
            f"--audit-policy-file={self._audit_policy()}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--profiling=false",
            f"--v={self.verbosity}",
        ]

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: one JSON event per request, at the Metadata level."""
        return self.workdir / "audit.log"

    def _audit_policy(self) -> Path:
        path = self.workdir / "audit-policy.yaml"
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived", "ResponseStarted"],
            "rules": [{"level": "Metadata"}],
        }
        path.write_text(yaml.safe_dump(policy))
        return path

    def _controller_manager_args(self) -> list[str]:
        pki = self.pki
        kubeconfig = str(self.workdir / "kube-controller-manager.kubeconfig")
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'service-account.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Quick reactions for tests: the default sync periods are tuned for large clusters.
            "--concurrent-gc-syncs=4",
            f"--node-monitor-grace-period={self.node_monitor_grace_seconds}s",
            f"--node-monitor-period={NODE_MONITOR_PERIOD_SECONDS}s",
            # Claims bind within seconds (default sync every 15 s): the examples mount a pre-bound claim.
            "--pvclaimbinder-sync-period=2s",
            "--profiling=false",
            f"--v={self.verbosity}",
        ]

    def _scheduler_args(self) -> list[str]:
        kubeconfig = str(self.workdir / "kube-scheduler.kubeconfig")
        config = self.workdir / "kube-scheduler.yaml"
        # A pod that did not fit is tried again within 2 s (default: 1 s doubling to 10 s), so tests see a
        # freed node or a newly bound claim used at once.
        config.write_text(
            yaml.safe_dump({
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": kubeconfig},
                "leaderElection": {"leaderElect": False},
                "podInitialBackoffSeconds": 1,
                "podMaxBackoffSeconds": 2,
            })
        )  # fmt: skip
        return [
            f"--config={config}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--v={self.verbosity}",
        ]


def main(argv: list[str] | None = None) -> int:
    """``python -m ascend_fleet_dev.real.controlplane --build``: build the binary (``make control-plane``)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--build", action="store_true", help="build the binary if needed and print its path")
    parser.add_argument("--print-digest", action="store_true", help="print the digest of the sources")
    parser.add_argument("--kube-version", metavar="MINOR", help=f"one of {', '.join(KUBE_MINORS)}")
    args = parser.parse_args(argv)
    try:
        if args.print_digest:
            print(source_digest())
            return 0
        began = time.monotonic()
        binary = ensure_binary(progress=print, kube_version=args.kube_version)
        print(json.dumps({"binary": str(binary), "seconds": round(time.monotonic() - began, 1)}))
    except ControlPlaneUnavailable as error:
        print(f"error: {error}")
        return 2
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
