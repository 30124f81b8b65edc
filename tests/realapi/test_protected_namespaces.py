"""The default install writes nothing in kube-system: on the real API server, the chart's ServiceAccount may
still read the NPU health ConfigMaps there, but every write it tries there is refused by the chart's
ValidatingAdmissionPolicy, while the same write in a fleet's namespace is admitted."""

from __future__ import annotations

import time
import uuid

import pytest

from ascend_fleet.kube import Kube, KubeError
from tests.chart import helm

pytestmark = pytest.mark.e2e

SENTENCE = "the ascend-fleet operator writes nothing in the cluster's own namespaces"


def config_map(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": namespace}}


def pod(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


@pytest.fixture
def operator_client(real_cluster):
    """The default release's ServiceAccount, as a client; and a namespace where fleets live."""
    admin = real_cluster.kube
    release = f"pn-{uuid.uuid4().hex[:6]}"
    home, fleets = real_cluster.create_namespace(f"{release}-system"), real_cluster.create_namespace(release)
    installed = helm.install(real_cluster.kubeconfig, release, home, driver="secret")
    try:
        (account,) = [o["metadata"]["name"] for o in installed.objects if o["kind"] == "ServiceAccount"]
        assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= {
            o["kind"] for o in installed.objects
        }
        token = admin.request_token(home, account, 3600)
        path = real_cluster.kubeconfig.parent / f"{release}.kubeconfig"
        real_cluster.cluster.write_kubeconfig(path, token=token)
        yield Kube.connect(str(path)), fleets
    finally:
        helm.uninstall(real_cluster.kubeconfig, release, home, driver="secret")
        admin.delete_namespace(home)
        admin.delete_namespace(fleets)


def refusal(kube: Kube, obj: dict, seconds: float = 20) -> str:
    """The API server's refusal of a dry-run create; the policy takes a moment to reach the admission chain."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            kube.create(obj, exist_ok=False, dry_run=True)
        except KubeError as error:
            return str(error)
        if time.monotonic() > deadline:
            return ""
        time.sleep(0.5)


def test_the_default_install_writes_nothing_in_kube_system(operator_client):
    kube, fleets = operator_client
    # Granted by the roles (cluster-wide), admitted in the fleets' namespace ...
    assert kube.create(config_map(fleets), exist_ok=False, dry_run=True) is not None
    assert kube.create(pod(fleets), exist_ok=False, dry_run=True) is not None
    # ... refused in kube-system, by the policy and not by RBAC.
    for obj in (config_map("kube-system"), pod("kube-system")):
        assert SENTENCE in refusal(kube, obj)
    # Reads pass: the NPU health ConfigMaps are listed there.
    assert isinstance(kube.list("ConfigMap", "kube-system"), list)
