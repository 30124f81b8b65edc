"""The two Kubernetes APIs the benchmarks run against: the local emulator and the real control plane.

Both give the same handle: an admin :class:`~ascend_fleet.kube.Kube`, a ``kubernetes`` ApiClient, and how a
child process (the operator under measurement) connects (``--api URL`` or ``--kubeconfig FILE``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import yaml

from ascend_fleet.kube import Kube
from ascend_fleet_dev.stack import LocalCluster, local_cluster, stack

ROOT = Path(__file__).resolve().parents[1]
CRD_FILE = ROOT / "crds" / "inference.ascendfleet.io_ascendinferences.yaml"
NAMES = {False: "emulator", True: "real control plane"}


@dataclass
class Backend:
    name: str
    kube: Kube
    client: kubernetes.client.ApiClient
    connect_args: list[str]  # for the operator's process
    cluster: LocalCluster


@contextlib.contextmanager
def backend(real: bool, pods: int, npus_per_pod: int = 2, start_seconds: float = 0.2) -> Iterator[Backend]:
    """A fresh cluster with the project's CRD, with room for ``pods`` engine pods of ``npus_per_pod`` NPUs.

    ``start_seconds``: how long a simulated engine takes to start before its pod can turn Ready.
    """
    crd = yaml.safe_load(CRD_FILE.read_text())
    if not real:
        cluster = local_cluster(start_seconds=start_seconds, ready_seconds=0.2)
    else:
        nodes = max(2, min(8, pods // 500 + 1))
        per_node = pods // nodes + 8
        cluster = local_cluster(
            real=True,
            nodes=nodes,
            npus_per_node=per_node * npus_per_pod,
            start_seconds=start_seconds,
            ready_seconds=0.2,
            # A real kubelet admits 110 pods; the simulated nodes stand for a larger fleet, so they admit more.
            node_capacity={"pods": str(per_node), "cpu": str(per_node * 16), "memory": f"{per_node * 128}Gi"},
        )
    with stack(cluster, crds=[crd], user_agent="bench") as local:
        connect = ["--kubeconfig", str(cluster.kubeconfig_path)] if real else ["--api", cluster.url]
        yield Backend(NAMES[real], local.kube, local.kube.api, connect, cluster)
