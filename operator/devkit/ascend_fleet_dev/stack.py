"""One way to assemble a local stack: a Kubernetes API with simulated NPU nodes, CRDs, Prometheus, engines.

Two backends stand behind one :class:`LocalCluster` protocol: the in-process emulator
(:class:`~ascend_fleet_dev.cluster.DevCluster`, milliseconds to start, fault injection) and the real
control plane (:class:`~ascend_fleet_dev.real.realcluster.RealCluster`: etcd, kube-apiserver, the
controllers, RBAC). :func:`stack` starts one of them and what the caller asks for on top of it, in one
order, and stops everything in reverse; the CLI, the demo, the benchmarks and the test fixtures all use it::

    with stack(real=False, crds=[crd()], prometheus=True, scenario=Scenario.demo()) as local:
        local.kube.create(doc)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from ascend_fleet.kube import Kube
from ascend_fleet.kube.client import USER_AGENT

if TYPE_CHECKING:
    from ascend_fleet_dev.fleet.engines import SimulatedEngines
    from ascend_fleet_dev.fleet.prometheus import PrometheusServer
    from ascend_fleet_dev.fleet.scenario import Scenario
    from ascend_fleet_dev.real.realengines import RealEngines

SIMULATED = "simulated"
VLLM = "vllm"
ENGINE_KINDS = (SIMULATED, VLLM)


class SimulatedNodes(Protocol):
    """The nodes of a local cluster: they run pods and tell listeners (the simulated engines) about them."""

    def add_listener(self, listener: Any) -> None:
        """Call ``listener.on_pod_running`` / ``on_pod_stopped`` as pods start and stop."""
        ...


class LocalCluster(Protocol):
    """A Kubernetes cluster on this machine whose nodes this project simulates."""

    kubeconfig_path: Path | None
    nodes: int

    @property
    def url(self) -> str:
        """The API server's URL."""
        ...

    @property
    def kubelet(self) -> SimulatedNodes:
        """The simulated nodes: their listeners and test controls (crash, fail, vanish)."""
        ...

    def kube(self, user_agent: str = USER_AGENT) -> Kube:
        """A client with the cluster's administrator's rights."""
        ...

    def install_crd(self, crd: Mapping[str, Any]) -> None:
        """Create a CustomResourceDefinition and wait until its resource is served."""
        ...

    def start(self) -> Self:
        """Start the cluster and wait until its API answers."""
        ...

    def stop(self) -> None:
        """Stop the cluster (idempotent)."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@dataclass
class Stack:
    """A running local stack: the cluster, an admin client, and Prometheus and the engines when asked for."""

    cluster: LocalCluster
    kube: Kube
    prometheus: PrometheusServer | None = None
    engines: SimulatedEngines | None = None
    real_engines: RealEngines | None = None


def local_cluster(
    *,
    real: bool = False,
    nodes: int = 4,
    start_seconds: float = 1.0,
    ready_seconds: float = 1.0,
    kubeconfig: str | Path | None = None,
    npus_per_node: int = 8,
    resource_name: str = "huawei.com/Ascend910",
    node_capacity: Mapping[str, str] | None = None,
    workdir: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    request_log_limit: int | None = None,
    node_monitor_grace_seconds: int | None = None,
) -> LocalCluster:
    """A cluster not yet started: the real control plane with ``real``, else the emulator.

    ``npus_per_node``, ``resource_name``, ``node_capacity`` (entries that replace the node's defaults) and
    ``workdir`` shape the real control plane's nodes, ``node_monitor_grace_seconds`` how long its controller
    manager waits for a silent node; ``host``, ``port`` and ``request_log_limit`` the
    emulator's API server.
    """
    if real:
        from ascend_fleet_dev.real.realcluster import RealCluster

        cluster = RealCluster(
            workdir=workdir,
            kubeconfig=kubeconfig,
            nodes=nodes,
            npus_per_node=npus_per_node,
            resource_name=resource_name,
            start_seconds=start_seconds,
            ready_seconds=ready_seconds,
            **(
                {}
                if node_monitor_grace_seconds is None
                else {"node_monitor_grace_seconds": node_monitor_grace_seconds}
            ),
        )
        cluster.capacity = {**cluster.capacity, **(node_capacity or {})}
        return cluster
    from ascend_fleet_dev.cluster import DevCluster

    return DevCluster(
        host,
        port,
        kubeconfig=kubeconfig,
        start_seconds=start_seconds,
        ready_seconds=ready_seconds,
        nodes=nodes,
        request_log_limit=request_log_limit,
    )


@contextlib.contextmanager
def stack(
    cluster: LocalCluster | None = None,
    *,
    crds: Sequence[Mapping[str, Any]] = (),
    prometheus: bool = False,
    scenario: Scenario | None = None,
    engine_options: Mapping[str, Any] | None = None,
    user_agent: str = USER_AGENT,
    engines: str = SIMULATED,
    real_engine_limit: int | None = None,
    **cluster_options: Any,
) -> Iterator[Stack]:
    """Start ``cluster`` (or :func:`local_cluster` of ``cluster_options``), install ``crds``, then a Prometheus
    when ``prometheus`` and simulated engines fed by ``scenario`` when given; stop all of it in reverse.

    ``engine_options`` go to :class:`~ascend_fleet_dev.fleet.engines.SimulatedEngines`; the engines,
    simulated and real, register with Prometheus as scrape targets. With ``engines="vllm"`` (the real control plane only)
    vllm-ascend engine pods run as real ``vllm serve`` processes instead, at most ``real_engine_limit``
    (:mod:`~ascend_fleet_dev.real.realengines`); SGLang pods stay simulated.
    """
    if engines not in ENGINE_KINDS:
        raise ValueError(f"engines must be one of {', '.join(ENGINE_KINDS)}, not {engines!r}")
    if cluster is None:
        cluster = local_cluster(**cluster_options)
    elif cluster_options:
        raise TypeError(f"options for a new cluster given with a cluster: {sorted(cluster_options)}")
    with contextlib.ExitStack() as running:
        running.enter_context(cluster)
        kube = cluster.kube(user_agent)
        for crd in crds:
            cluster.install_crd(crd)
        server = None
        if prometheus:
            from ascend_fleet_dev.fleet.prometheus import PrometheusServer

            server = running.enter_context(PrometheusServer(scrape_interval="1s"))
        real = None
        if engines == VLLM:
            real = running.enter_context(_real_engines(cluster, real_engine_limit, server))
            cluster.kubelet.add_listener(real)
        simulated = None
        if scenario is not None:
            from ascend_fleet_dev.fleet.engines import SimulatedEngines

            options = {**(engine_options or {}), **({"served_elsewhere": real.claims} if real else {})}
            simulated = running.enter_context(SimulatedEngines(scenario, prometheus=server, **options))
            cluster.kubelet.add_listener(simulated)
        yield Stack(cluster, kube, server, simulated, real)


def _real_engines(
    cluster: LocalCluster, limit: int | None, prometheus: PrometheusServer | None
) -> RealEngines:
    """Real vLLM engines for the real control plane's node agent, from the built environment, scraped by
    ``prometheus`` when there is one."""
    from ascend_fleet_dev.real.realcluster import RealCluster
    from ascend_fleet_dev.real.realengines import DEFAULT_LIMIT, RealEngines, RealEnginesUnavailable
    from ascend_fleet_dev.real.vllm_env import (
        expected_environment,
        find_environment,
        install_plugin,
    )

    if not isinstance(cluster, RealCluster):
        raise RealEnginesUnavailable("real vLLM engines run on the real control plane only (real=True)")
    environment = find_environment()
    if environment is None:
        raise RuntimeError(
            f"vLLM's CPU environment is not built ({expected_environment().root}): make engine-vllm"
        )
    install_plugin(environment)
    return RealEngines(
        environment,
        cluster.kubelet,
        limit=DEFAULT_LIMIT if limit is None else limit,
        prometheus=prometheus,
    )
