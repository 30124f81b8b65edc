"""``RealCluster``: the real control plane plus the node agent, shaped like :class:`DevCluster`.

``ascend-fleet dev-cluster --real``, ``ascend-fleet dev --real`` and the end-to-end tests use it::

    with RealCluster(nodes=4) as cluster:
        subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig_path), "get", "nodes"])

:attr:`kubelet` is the :class:`~ascend_fleet_dev.real.nodeagent.NodeAgent`, with the same listeners and test
controls as the emulator's kubelet simulator.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from ascend_fleet.kube import Kube
from ascend_fleet.kube.client import USER_AGENT
from ascend_fleet_dev.fleet.kubelet import DEFAULT_NODE_CAPACITY
from ascend_fleet_dev.local.crds import install_crd
from ascend_fleet_dev.local.ports import PodNetwork
from ascend_fleet_dev.real.controlplane import (
    DEV_NODE_MONITOR_GRACE_SECONDS,
    ControlPlane,
)
from ascend_fleet_dev.real.nodeagent import NodeAgent

if TYPE_CHECKING:
    pass


class RealCluster:
    """A control plane in ``workdir`` (temporary by default) with ``nodes`` simulated NPU nodes."""

    def __init__(
        self,
        *,
        workdir: str | Path | None = None,
        kubeconfig: str | Path | None = None,
        nodes: int = 4,
        npus_per_node: int = 8,
        resource_name: str = "huawei.com/Ascend910",
        start_seconds: float = 1.0,
        ready_seconds: float = 1.0,
        node_monitor_grace_seconds: int = DEV_NODE_MONITOR_GRACE_SECONDS,
    ) -> None:
        capacity: Mapping[str, str] = {
            **{k: v for k, v in DEFAULT_NODE_CAPACITY.items() if not k.startswith("huawei.com/")},
            resource_name: str(npus_per_node),
        }
        self.control_plane = ControlPlane(workdir, node_monitor_grace_seconds=node_monitor_grace_seconds)
        self.nodes, self.capacity = nodes, capacity
        self.start_seconds, self.ready_seconds = start_seconds, ready_seconds
        self._kubeconfig = Path(kubeconfig).expanduser() if kubeconfig else None
        self._agent: NodeAgent | None = None
        self._network: PodNetwork | None = None
        self.kubeconfig_path: Path | None = None
        self.start_time = 0.0

    @property
    def url(self) -> str:
        return self.control_plane.url

    @property
    def kubelet(self) -> NodeAgent:
        if self._agent is None:
            raise RuntimeError("the cluster is not running")
        return self._agent

    def outage(self, *components: str) -> contextlib.AbstractContextManager[None]:
        """Stop control-plane ``components`` (kube-apiserver by default) for a ``with`` block, then start them
        and wait until the API is ready (:meth:`ControlPlane.outage`)."""
        return self.control_plane.outage(*components)

    def stop_component(self, component: str) -> None:
        """Stop one control-plane component and keep it down (not restarted) until :meth:`start_component`."""
        self.control_plane.stop_component(component)

    def start_component(self, component: str) -> None:
        """Start a component stopped by :meth:`stop_component` and wait until the API is ready."""
        self.control_plane.start_component(component)

    def write_kubeconfig(self, path: str | Path, *, token: str | None = None) -> Path:
        return self.control_plane.write_kubeconfig(path, token=token)

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
        began = time.monotonic()
        self.control_plane.start()
        try:
            self._network = PodNetwork()  # pod addresses no other cluster on this machine hands out
            self._agent = NodeAgent(
                self.control_plane.admin,
                nodes=self.nodes,
                node_capacity=self.capacity,
                start_seconds=self.start_seconds,
                ready_seconds=self.ready_seconds,
                first_ip=self._network.first_ip,
            ).start()
            self.kubeconfig_path = (
                self.write_kubeconfig(self._kubeconfig)
                if self._kubeconfig
                else self.control_plane.admin_kubeconfig
            )
        except BaseException:
            self.stop()
            raise
        self.start_time = time.monotonic() - began
        return self

    def stop(self) -> None:
        if self._agent is not None:
            self._agent.stop()
            self._agent = None
        if self._network is not None:
            self._network.release()
            self._network = None
        self.control_plane.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def provide_model_claim(kube: Kube, namespace: str, claim: str = "models") -> None:
    """A PersistentVolume pre-bound to the claim ``claim`` in ``namespace``, and the claim: what the examples
    mount. The real scheduler places no pod whose claim is missing or unbound; the simulated nodes mount nothing.
    """
    volume = f"{claim}-{namespace}"
    core = kubernetes.client.CoreV1Api(kube.api)
    _create(core.create_persistent_volume, {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadOnlyMany", "ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "hostPath": {"path": "/var/lib/ascend-fleet-dev-models"},
                 "claimRef": {"namespace": namespace, "name": claim}},
    })  # fmt: skip
    _create(functools.partial(core.create_namespaced_persistent_volume_claim, namespace), {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": volume,
                 "resources": {"requests": {"storage": "1Ti"}}},
    })  # fmt: skip


def _create(create: Callable[..., Any], body: dict) -> None:
    try:
        create(body)
    except ApiException as error:
        if error.status != 409:  # 409: there already
            raise
