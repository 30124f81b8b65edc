"""`helm install` on the real control plane gives a working operator: its pod runs the operator.

The simulated nodes run the chart's operator pod as this package's CLI with the pod's own arguments, config
file (the chart's ConfigMap) and ServiceAccount token, so what reconciles the fleet here is exactly what the
chart deploys: the Deployment, the config it renders and the RBAC it grants (the audit log shows who wrote).
"""

from __future__ import annotations

import uuid

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.localpods import LocalPods, operator_container
from tests.chart import helm
from tests.e2e.fleet import example
from tests.support.rbac import audit_events

pytestmark = pytest.mark.e2e


@pytest.fixture
def real(cluster):
    if cluster is None or hasattr(cluster, "emulator"):
        pytest.skip("runs the chart's Deployment, which needs the real controllers")
    return cluster


def test_helm_install_runs_an_operator_pod_that_reconciles_as_the_charts_service_account(
    real, kube, namespace
):
    release = f"op-{uuid.uuid4().hex[:6]}"
    home = f"{release}-system"
    kube.create_namespace(home)
    engines = SimulatedEngines(Scenario.constant(0.0))
    local = LocalPods(kube, real.cluster.control_plane, pickers=False)
    real.kubelet.add_listener(engines)
    real.kubelet.add_listener(local)
    try:
        installed = helm.install(
            real.kubeconfig, release, home, {"operator": {"watchNamespaces": [namespace]}}, driver="secret"
        )
        (account,) = [o["metadata"]["name"] for o in installed.objects if o["kind"] == "ServiceAccount"]
        pod = wait_for(
            lambda: next((p for p in kube.list("Pod", home) if operator_container(p)), None),
            60,
            "the chart's operator pod",
        )
        wait_for(
            lambda: (home, pod["metadata"]["name"]) in local.running(),
            90,
            f"the operator running in its pod ({local.failures})",
        )
        doc = example("sglang-small.yaml", rules=[])
        doc["metadata"]["namespace"] = namespace
        kube.create(doc)
        name = doc["metadata"]["name"]
        wait_for(
            lambda: (kube.get(names.KIND, namespace, name).get("status") or {}).get("readyReplicas") == 1,
            120,
            "the fleet reconciled by the operator pod",
        )
        # The fleet's pods were created by the chart's ServiceAccount, through its token and its RBAC.
        writers = pod_creators(real.cluster.control_plane.audit_log, namespace)
        assert writers == {f"system:serviceaccount:{home}:{account}"}, writers
    finally:
        real.kubelet.remove_listener(local)
        real.kubelet.remove_listener(engines)
        local.close()
        engines.close()
        kube.delete_namespace(home)


def pod_creators(audit_log, namespace: str) -> set[str]:
    """Who created pods in ``namespace`` (not their bindings), from the API server's audit log."""
    return {
        (event.get("user") or {}).get("username")
        for event in audit_events(audit_log)
        if event.get("verb") == "create"
        and (ref := event.get("objectRef") or {}).get("resource") == "pods"
        and ref.get("namespace") == namespace
        and "subresource" not in ref  # the scheduler's bindings create pods/binding
    }
