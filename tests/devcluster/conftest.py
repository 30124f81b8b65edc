"""Fixtures for the local Kubernetes API tests: one dev cluster per session, a namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import kubernetes.client
import pytest

from ascend_fleet_dev.cluster import DevCluster
from ascend_fleet_dev.testing import api_client
from tests.devcluster.helpers import widget_crd


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[DevCluster]:
    with DevCluster(start_seconds=0.1, ready_seconds=0.1) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def k8s_api(dev_cluster: DevCluster) -> Iterator[kubernetes.client.ApiClient]:
    with api_client(dev_cluster.url) as client:
        yield client


@pytest.fixture()
def core(k8s_api: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(k8s_api)


@pytest.fixture()
def custom(k8s_api: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(k8s_api)


@pytest.fixture()
def test_namespace(core: kubernetes.client.CoreV1Api) -> str:
    """A fresh namespace, so that tests sharing the session's cluster never see each other's objects."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture(scope="session")
def widgets(k8s_api: kubernetes.client.ApiClient) -> str:
    """The plural of a test CRD (status + scale subresources) registered for the session."""
    kubernetes.client.ApiextensionsV1Api(k8s_api).create_custom_resource_definition(widget_crd())
    return "widgets"
