"""The real control plane for tests: one per test session, with the project's CRD applied by kubectl.

``real_cluster`` starts :class:`~ascend_fleet_dev.real.realcluster.RealCluster` (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler built from the Kubernetes release's Go modules, plus the node agent's
simulated NPU nodes). Without Go it skips on a developer's machine and fails under CI, which must have it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ascend_fleet.kube import Kube, wait_for
from ascend_fleet_dev.real.controlplane import ControlPlaneUnavailable, ensure_binary
from ascend_fleet_dev.real.realcluster import RealCluster
from ascend_fleet_dev.stack import stack
from tests.support.paths import CRD_FILE


@dataclass
class RealClusterHandle:
    """What a test gets: the running cluster, an admin kubeconfig and client, and kubectl."""

    cluster: RealCluster
    kubeconfig: Path
    kube: Kube

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def kubelet(self):  # noqa: ANN201 - the node agent, with the emulator kubelet's test controls
        return self.cluster.kubelet

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create namespace ``name`` and wait for its ``default`` service account: the API server admits
        (even dry-runs) no pod before the controller manager has made it."""
        self.kube.create_namespace(name, labels=labels)
        wait_for_service_account(self.kube, name)
        return name

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the machine's kubectl against the cluster as the admin; ``check`` raises with its stderr."""
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, input=input, timeout=120,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result


def control_plane_or_skip() -> None:
    """Skip (fail under CI) where the control plane cannot be built."""
    try:
        ensure_binary(progress=lambda line: print(line, flush=True))
    except ControlPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to run the real control plane: {error}")
        pytest.skip(str(error))


STARTED: list[
    RealClusterHandle
] = []  # the session's cluster once started (the RBAC check reads its audit log)


@contextlib.contextmanager
def running_cluster(**options) -> Iterator[RealClusterHandle]:
    """A real control plane of ``options`` (see :func:`~ascend_fleet_dev.stack.local_cluster`), with
    the project's CRD applied by kubectl."""
    control_plane_or_skip()
    with stack(real=True, start_seconds=0.2, ready_seconds=0.3, **options) as local:
        cluster = local.cluster
        assert isinstance(cluster, RealCluster) and cluster.kubeconfig_path is not None
        handle = RealClusterHandle(
            cluster, cluster.kubeconfig_path, Kube.connect(str(cluster.kubeconfig_path))
        )
        handle.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
        handle.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRD_FILE))
        yield handle


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealClusterHandle]:
    # Six 16-NPU nodes: room for the largest example (4 pods of 8 NPUs) and the A3 example (16 NPUs a pod).
    with running_cluster(nodes=6, npus_per_node=16) as handle:
        STARTED.append(handle)
        yield handle
        STARTED.remove(handle)


OPERATOR_NAMESPACE = "ascend-system"
OPERATOR_RELEASE = "ascend-fleet"


def wait_for_service_account(
    kube: Kube, namespace: str, name: str = "default", timeout: float = 60.0
) -> None:
    """Pods are admitted once their service account exists; the real controller manager creates ``default``."""
    wait_for(
        lambda: kube.get("ServiceAccount", namespace, name),
        timeout=timeout,
        what=f"service account {namespace}/{name}",
        interval=0.1,
    )


@pytest.fixture(scope="session")
def operator_kubeconfig(real_cluster, tmp_path_factory) -> Path:
    """A kubeconfig holding a token of the chart's ServiceAccount (see :func:`chart_operator_kubeconfig`)."""
    return chart_operator_kubeconfig(real_cluster, tmp_path_factory.mktemp("operator") / "kubeconfig")


def chart_operator_kubeconfig(real_cluster: RealClusterHandle, path: Path) -> Path:
    """``helm install`` of the chart, then a TokenRequest for its ServiceAccount written to ``path``, as the
    operator's pod would get it (no operator pod runs: the tests run the operator)."""
    from tests.chart import helm

    admin = real_cluster.kube
    with contextlib.suppress(Exception):
        admin.create_namespace(OPERATOR_NAMESPACE)
    release = helm.install(
        real_cluster.kubeconfig,
        OPERATOR_RELEASE,
        OPERATOR_NAMESPACE,
        {"operator": {"replicas": 0}},
        driver="secret",
    )
    (account,) = [o["metadata"]["name"] for o in release.objects if o["kind"] == "ServiceAccount"]
    wait_for_service_account(admin, OPERATOR_NAMESPACE, account)
    token = admin.request_token(OPERATOR_NAMESPACE, account)
    return real_cluster.cluster.write_kubeconfig(path, token=token)
