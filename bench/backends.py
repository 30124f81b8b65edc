"""The two Kubernetes APIs the benchmarks run against: the local emulator and the real control plane.

Both give the same handle: an admin :class:`~ascend_fleet.kube.Kube`, a ``kubernetes`` ApiClient, and how a
child process (the operator under measurement) connects (``--api URL`` or ``--kubeconfig FILE``).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import kubernetes.config
import yaml

from ascend_fleet.kube import Kube

ROOT = Path(__file__).resolve().parents[1]
CRD_FILE = ROOT / "crds" / "inference.ascendfleet.io_ascendinferences.yaml"
NAMES = {False: "emulator", True: "real control plane"}


@dataclass
class Backend:
    name: str
    kube: Kube
    client: kubernetes.client.ApiClient
    connect_args: list[str]  # for the operator's process
    cluster: object  # DevCluster or RealCluster


def _client_from_kubeconfig(path: str) -> kubernetes.client.ApiClient:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=path, client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


@contextlib.contextmanager
def backend(real: bool, pods: int, npus_per_pod: int = 2, start_seconds: float = 0.2) -> Iterator[Backend]:
    """A fresh cluster with the project's CRD, with room for ``pods`` engine pods of ``npus_per_pod`` NPUs.

    ``start_seconds``: how long a simulated engine takes to start before its pod can turn Ready.
    """
    if not real:
        from ascend_fleet.devcluster.cluster import DevCluster

        with DevCluster(start_seconds=start_seconds, ready_seconds=0.2) as cluster:
            configuration = kubernetes.client.Configuration()
            configuration.host = cluster.url
            client = kubernetes.client.ApiClient(configuration)
            kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(
                yaml.safe_load(CRD_FILE.read_text())
            )
            yield Backend(
                NAMES[False], Kube(client, user_agent="bench"), client, ["--api", cluster.url], cluster
            )
        return
    from ascend_fleet.devcluster.real.realcluster import RealCluster

    nodes = max(2, min(8, pods // 500 + 1))
    per_node = pods // nodes + 8
    cluster = RealCluster(
        nodes=nodes,
        npus_per_node=per_node * npus_per_pod,
        start_seconds=start_seconds,
        ready_seconds=0.2,
    )
    # A real kubelet admits 110 pods; the simulated nodes stand for a larger fleet, so they admit more.
    cluster.capacity = {
        **cluster.capacity,
        "pods": str(per_node),
        "cpu": str(per_node * 16),
        "memory": f"{per_node * 128}Gi",
    }
    with cluster:
        kubeconfig = str(cluster.kubeconfig_path)
        for args in (
            ["apply", "--server-side", "-f", str(CRD_FILE)],
            ["wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRD_FILE)],
        ):
            subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=True, capture_output=True)
        client = _client_from_kubeconfig(kubeconfig)
        yield Backend(
            NAMES[True], Kube(client, user_agent="bench"), client, ["--kubeconfig", kubeconfig], cluster
        )
