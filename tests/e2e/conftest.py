"""End-to-end fixtures: the operator against a Kubernetes API, through the API only.

By default the API is the project's local cluster (kmock's emulator + compatibility layer + kubelet
simulator). With ``ASCEND_FLEET_E2E_KUBECONFIG`` pointing at a real cluster (with the CRD installed),
the same tests run there; tests that need the simulated kubelet's controls (crashing a pod,
injecting API faults) are skipped.
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
from tests.e2e.fleet import Fleet
from tests.support.rbac import HARNESS, record_operator_requests

REAL_CLUSTER = os.environ.get("ASCEND_FLEET_E2E_KUBECONFIG")


def fast_settings() -> OperatorSettings:
    """Timers in seconds so the suite runs quickly."""
    return OperatorSettings.model_validate(
        {"reconcile": {"backoffInitial": "2s", "backoffMax": "8s", "resyncInterval": "5s", "watchTimeout": "3s"}}
    )


@pytest.fixture
def cluster():
    """The local cluster (None against a real one)."""
    if REAL_CLUSTER:
        yield None
        return
    from ascend_fleet.devcluster.cluster import DevCluster

    with DevCluster(start_seconds=0.2, ready_seconds=0.3) as local:
        yield local
        record_operator_requests(local, "e2e")


@pytest.fixture
def local_cluster(cluster):
    if cluster is None:
        pytest.skip("needs the local cluster's simulated kubelet or fault injection")
    return cluster


@pytest.fixture
def kube(cluster) -> Kube:
    if cluster is None:
        return Kube.connect(REAL_CLUSTER)
    from ascend_fleet.devcluster.testing import api_client

    client = Kube(api_client(cluster.url), user_agent=HARNESS)
    client._call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd())
    return client


@pytest.fixture
def namespace(kube) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube._call("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": name}})
    yield name
    with contextlib.suppress(Exception):
        kube._call("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def settings() -> OperatorSettings:
    return fast_settings()


@pytest.fixture
def operator(cluster, kube, settings):
    """A running operator with its own client; ``operator.restart()`` replaces it with a fresh one."""
    if cluster is None:
        handle = OperatorHandle(Kube.connect(REAL_CLUSTER), settings)
    else:
        from ascend_fleet.devcluster.testing import api_client

        handle = OperatorHandle(Kube(api_client(cluster.url)), settings)
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
