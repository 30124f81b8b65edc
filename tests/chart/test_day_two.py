"""Day two with the real Helm library: ``helm uninstall`` leaves the Inference Extension's CRDs, and every
InferencePool in them, in place (``helm.sh/resource-policy: keep``)."""

from __future__ import annotations

import pytest

from ascend_fleet.kube import wait_for
from tests.chart import helm
from tests.chart.installs import HELM_DRIVER, NAMESPACE, REAL, WATCHED, find

POOLS = "inferencepools.inference.networking.k8s.io"


def other_teams_pool() -> dict:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "their-pool", "namespace": WATCHED[0]},
        "spec": {
            "selector": {"matchLabels": {"app": "their-model"}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "their-picker", "port": {"number": 9002}},
        },
    }


@pytest.mark.skipif(
    not REAL, reason="uninstall reads the release record, which only Secrets keep across processes"
)
def test_uninstall_keeps_the_inference_extension_crds_and_the_pools_in_them(cluster, api):
    release = helm.install(
        cluster, "day-two", NAMESPACE, {"inferenceExtension": {"installCRDs": True}}, driver=HELM_DRIVER
    )
    templated = find(release.objects, "CustomResourceDefinition")
    assert {c["metadata"]["name"] for c in templated} >= {POOLS}
    assert all(c["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for c in templated)
    # The pinned files' own annotations stay beside it.
    assert all(
        "inference.networking.k8s.io/bundle-version" in c["metadata"]["annotations"] for c in templated
    )

    def served():
        api.resources.invalidate_cache()
        return api.resources.get(api_version="inference.networking.k8s.io/v1", kind="InferencePool")

    pools = wait_for(served, 30, "InferencePool to be served", interval=0.2)
    pools.create(body=other_teams_pool(), namespace=WATCHED[0])
    deployments = api.resources.get(api_version="apps/v1", kind="Deployment")
    assert deployments.get(namespace=NAMESPACE).items  # the release's operator

    helm.uninstall(cluster, "day-two", NAMESPACE, driver=HELM_DRIVER)

    crds = api.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    wait_for(lambda: not deployments.get(namespace=NAMESPACE).items, 30, "the release's Deployment to go")
    for crd in templated:
        assert crds.get(name=crd["metadata"]["name"]).metadata.deletionTimestamp is None
    assert pools.get(name="their-pool", namespace=WATCHED[0]).metadata.name == "their-pool"
