"""The chart tests' cluster: a real API server of each test module's own (the emulator with
``ASCEND_FLEET_E2E_BACKEND=emulator``), with the namespaces and the monitoring CRDs the releases need."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_fleet.kube import wait_for
from tests.chart.installs import MONITORING_KINDS, NAMESPACE, REAL, WATCHED, stand_in_monitoring_crd


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Path]:
    """A cluster of this module's own (the releases' cluster-wide objects would meet the e2e suite's)."""
    kubeconfig = tmp_path_factory.mktemp("kube") / "kubeconfig"
    from ascend_fleet_dev.stack import stack

    if REAL:
        from tests.support.realcluster import control_plane_or_skip

        control_plane_or_skip()
    with stack(real=REAL, nodes=1 if REAL else 4, kubeconfig=kubeconfig) as local:
        yield local.cluster.kubeconfig_path


@pytest.fixture(scope="module")
def api(cluster):
    from kubernetes import config
    from kubernetes.dynamic import DynamicClient

    client = DynamicClient(config.new_client_from_config(config_file=str(cluster)))
    namespaces = client.resources.get(api_version="v1", kind="Namespace")
    for name in [NAMESPACE, "monitoring", *WATCHED]:
        namespaces.create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    crds = client.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    for kind, plural in MONITORING_KINDS.items():
        crds.create(body=stand_in_monitoring_crd(kind, plural))

    def served() -> bool:  # the API serves a CRD's kind shortly after it is created
        client.resources.invalidate_cache()
        for kind in MONITORING_KINDS:
            client.resources.get(api_version="monitoring.coreos.com/v1", kind=kind)
        return True

    wait_for(served, 30, "the monitoring CRDs to be served", interval=0.2)
    return client
