"""End-to-end fixtures: the operator against a Kubernetes API, through the API only.

By default the API is the real control plane (``real_cluster``: kube-apiserver, etcd, the controller manager
and the scheduler built from the Kubernetes release's Go modules, with the node agent's simulated NPU nodes),
and the operator authenticates with a token of the ServiceAccount the Helm chart creates, so the real RBAC
authorizer enforces the chart's roles. ``ASCEND_FLEET_E2E_BACKEND=emulator`` runs the suite on the local
emulator instead; tests marked ``emulator`` (fault injection into the emulator) always run there. With
``ASCEND_FLEET_E2E_KUBECONFIG`` pointing at an existing cluster (with the CRD installed) the same tests run
there; tests that need the simulated kubelet's controls are skipped.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from ascend_fleet.api.crd import crd
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import Kube
from ascend_fleet_dev.real.realcluster import provide_model_claim
from tests.e2e.fleet import Fleet
from tests.support.rbac import HARNESS, SUITES, record_operator_requests
from tests.support.realcluster import wait_for_service_account

REAL_CLUSTER = os.environ.get("ASCEND_FLEET_E2E_KUBECONFIG")
BACKEND = os.environ.get("ASCEND_FLEET_E2E_BACKEND", "real")


def fast_settings() -> OperatorSettings:
    """Timers in seconds so the suite runs quickly."""
    return OperatorSettings.model_validate(
        {
            "reconcile": {
                "backoffInitial": "2s",
                "backoffMax": "8s",
                "resyncInterval": "5s",
                "watchTimeout": "3s",
            }
        }
    )


def on_emulator(request: pytest.FixtureRequest) -> bool:
    return BACKEND == "emulator" or request.node.get_closest_marker("emulator") is not None


@pytest.fixture
def cluster(request):
    """The cluster of this test: the real control plane, the emulator (DevCluster), or None (an existing one)."""
    if REAL_CLUSTER:
        yield None
        return
    if not on_emulator(request):
        yield request.getfixturevalue("real_cluster")
        return
    from ascend_fleet_dev.stack import stack

    with stack(start_seconds=0.2, ready_seconds=0.3) as local:
        yield local.cluster
        record_operator_requests(local.cluster, "e2e")


@pytest.fixture
def local_cluster(cluster):
    """A cluster whose nodes this project simulates (crash, fail and vanish pods); skipped on an existing one."""
    if cluster is None:
        pytest.skip("needs the simulated nodes' test controls")
    return cluster


@pytest.fixture
def emulator(cluster):
    """The local emulator (its fault-injection DSL); only for tests marked ``emulator``."""
    if cluster is None or not hasattr(cluster, "emulator"):
        pytest.skip("needs the local emulator's fault injection (mark the test `emulator`)")
    return cluster.emulator


@pytest.fixture
def kube(cluster) -> Kube:
    """The test harness's own client (an administrator)."""
    if cluster is None:
        return Kube.connect(REAL_CLUSTER)
    if hasattr(cluster, "emulator"):
        from ascend_fleet_dev.testing import api_client

        client = Kube(api_client(cluster.url), user_agent=HARNESS)
        client.create(crd(), exist_ok=False)
        return client
    client = Kube.connect(str(cluster.kubeconfig))
    client.api.user_agent = HARNESS
    return client


@pytest.fixture
def namespace(kube, cluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name)
    real = cluster is not None and not hasattr(cluster, "emulator")
    if real:
        wait_for_service_account(kube, name)
        provide_model_claim(kube, name)
    yield name
    with contextlib.suppress(Exception):
        kube.delete_namespace(name)
    if real:
        with contextlib.suppress(Exception):
            kube.delete("PersistentVolume", None, f"models-{name}")  # named by provide_model_claim


def operator_client(request: pytest.FixtureRequest, cluster) -> Kube:
    """The operator's own client: on the real control plane, as the chart's ServiceAccount."""
    if cluster is None:
        return Kube.connect(REAL_CLUSTER)
    if hasattr(cluster, "emulator"):
        from ascend_fleet_dev.testing import api_client

        return Kube(api_client(cluster.url))
    SUITES.add("e2e")  # the API server's audit log records what the operator asked for
    return Kube.connect(str(request.getfixturevalue("operator_kubeconfig")))


@pytest.fixture
def settings() -> OperatorSettings:
    return fast_settings()


@pytest.fixture
def operator(request, cluster, kube, settings):
    """A running operator with its own client; ``operator.restart()`` replaces it with a fresh one."""
    handle = OperatorHandle(operator_client(request, cluster), settings)
    yield handle
    handle.stop()


class OperatorHandle:
    def __init__(self, kube: Kube, settings: OperatorSettings):
        self.kube, self.settings = kube, settings
        self.thread = OperatorThread(OperatorContext(settings, kube), RunOptions()).__enter__()

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

    def restart(self) -> None:
        self.stop()
        self.thread = OperatorThread(OperatorContext(self.settings, self.kube), RunOptions()).__enter__()


@pytest.fixture
def fleet(kube, namespace, operator) -> Fleet:
    return Fleet(kube, namespace)
