"""``ascend-fleet dev-cluster``: a local cluster served until SIGINT or SIGTERM, and how to reach it printed.

Above :mod:`ascend_fleet_dev.stack`, which assembles either backend (the emulator's :class:`~ascend_fleet_dev.cluster.DevCluster`
or the real control plane's :class:`~ascend_fleet_dev.real.realcluster.RealCluster`), so neither backend imports the
stack that builds it.
"""

from __future__ import annotations

import contextlib
import sys

from ascend_fleet.kube import Kube
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.local.signals import stop_on_signals
from ascend_fleet_dev.real.controlplane import CONTROL_PLANE_COMPONENTS, ControlPlane, ensure_binary
from ascend_fleet_dev.real.localpods import Route
from ascend_fleet_dev.real.realcluster import RealCluster, provide_model_claim
from ascend_fleet_dev.stack import stack


def serve_emulator(
    host: str = "127.0.0.1",
    port: int = 0,
    kubeconfig: str = "~/.kube/ascend-fleet-dev.yaml",
    start_seconds: float = 1.0,
    ready_seconds: float = 1.0,
    nodes: int = 4,
    prometheus: bool = False,
) -> None:
    """Run a dev cluster until SIGINT or SIGTERM (``ascend-fleet dev-cluster``); print how to reach it.

    Running pods are simulated engines that serve the OpenAI API on their pod IPs (as in ``ascend-fleet
    dev``), so ``ascend-fleet tune`` and plain HTTP clients can measure them; ``prometheus`` adds a real
    Prometheus scraping them."""
    with (
        stop_on_signals() as stopping,
        stack(
            host=host,
            port=port,
            kubeconfig=kubeconfig,
            start_seconds=start_seconds,
            ready_seconds=ready_seconds,
            nodes=nodes,
            request_log_limit=10_000,
            prometheus=prometheus,
            scenario=Scenario.constant(0.0),
        ) as local,
    ):
        print(f"Kubernetes API (local, no auth): {local.cluster.url}", flush=True)
        if local.prometheus is not None:
            print(f"Prometheus (scraping the engines): {local.prometheus.url}", flush=True)
        print(f"export KUBECONFIG={local.cluster.kubeconfig_path}", flush=True)
        print("Press Ctrl+C to stop.", file=sys.stderr, flush=True)
        while not stopping.wait(0.5):
            pass


def serve_real(
    kubeconfig: str = "~/.kube/ascend-fleet-real.yaml",
    nodes: int = 4,
    npus_per_node: int = 8,
    resource_name: str = "huawei.com/Ascend910",
    workdir: str | None = None,
    start_seconds: float = 1.0,
    ready_seconds: float = 1.0,
    prometheus: bool = False,
    engines: str = "simulated",
    real_engine_limit: int | None = None,
) -> None:
    """Run a real control plane with simulated nodes until SIGINT/SIGTERM (``ascend-fleet dev-cluster --real``).

    Engine pods run as simulated engines serving the OpenAI API on their pod IPs; endpoint-picker pods run as
    the upstream picker behind an Envoy gateway each, whose address is printed as it comes up, and operator
    pods (``helm install``) as this package's operator (:mod:`~ascend_fleet_dev.real.localpods`). The
    Inference Extension's CRDs are installed, as on a cluster with an inference gateway. ``prometheus`` adds a
    real Prometheus scraping the engines. ``engines="vllm"`` runs vllm-ascend engine pods as real ``vllm
    serve`` processes (:mod:`~ascend_fleet_dev.real.realengines`), at most ``real_engine_limit``."""
    with stop_on_signals() as stopping:
        ensure_binary(progress=_say)
        _say(
            "Starting the Kubernetes control plane (etcd, kube-apiserver, controller manager, scheduler) ..."
        )
        with (
            stack(
                real=True,
                workdir=workdir,
                kubeconfig=kubeconfig,
                nodes=nodes,
                npus_per_node=npus_per_node,
                resource_name=resource_name,
                start_seconds=start_seconds,
                ready_seconds=ready_seconds,
                prometheus=prometheus,
                scenario=Scenario.constant(0.0),
                engines=engines,
                real_engine_limit=real_engine_limit,
            ) as local,
            contextlib.ExitStack() as pods,
        ):
            cluster = local.cluster
            assert isinstance(cluster, RealCluster)  # real=True
            print(f"Kubernetes API (real kube-apiserver, RBAC on): {cluster.url}", flush=True)
            print(
                f"{nodes} simulated nodes with {npus_per_node} x {resource_name} each, up in "
                f"{cluster.start_time:.1f}s",
                flush=True,
            )
            _print_components(cluster.control_plane)
            if local.prometheus is not None:
                print(f"Prometheus (scraping the engines): {local.prometheus.url}", flush=True)
            if local.real_engines is not None:
                print(
                    f"vllm-ascend engine pods run as real vllm serve (CPU build, tiny model), at most "
                    f"{local.real_engines.limit} at once; SGLang pods stay simulated",
                    flush=True,
                )
            _run_local_pods(local.kube, cluster, pods)
            # The examples mount the claim `models`; on a real cluster an admin provides the storage.
            provide_model_claim(local.kube, "default")
            print("claim default/models provided (a pre-bound volume the examples mount)", flush=True)
            print(f"export KUBECONFIG={cluster.kubeconfig_path}", flush=True)
            _say("Press Ctrl+C to stop.")
            while not stopping.wait(0.5):
                pass


def _run_local_pods(kube: Kube, cluster: RealCluster, pods: contextlib.ExitStack) -> None:
    """The Inference Extension's CRDs, and operator and picker pods as real processes on this machine."""
    from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable
    from ascend_fleet_dev.real.localpods import LocalPods, install_inference_extension

    try:
        installed = install_inference_extension(kube)
        print(f"Inference Extension CRDs installed: {', '.join(installed)}", flush=True)
    except DataPlaneUnavailable as error:
        _say(f"the Inference Extension CRDs are not installed: {error}")
    try:
        local = LocalPods(kube, cluster.control_plane, on_route=_print_route)
    except DataPlaneUnavailable as error:
        _say(f"endpoint-picker pods will not run (routing.mode inferencePool gets no gateway): {error}")
        local = LocalPods(kube, cluster.control_plane, pickers=False)
    cluster.kubelet.add_listener(pods.enter_context(local))


def _print_components(control_plane: ControlPlane) -> None:
    """The components' process ids: ``kill -9`` one to see it restarted, ``kill -STOP``/``-CONT`` for a hang."""
    pids = ", ".join(f"{name} {control_plane.pid(name)}" for name in CONTROL_PLANE_COMPONENTS)
    print(f"control plane processes (restarted when they die): {pids}", flush=True)


def _print_route(route: Route, up: bool) -> None:
    if up:
        print(
            f"InferencePool {route.namespace}/{route.pool}: send requests to {route.url} "
            f"(Envoy -> endpoint picker pod {route.picker})",
            flush=True,
        )
    else:
        print(f"InferencePool {route.namespace}/{route.pool}: picker pod {route.picker} stopped", flush=True)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
