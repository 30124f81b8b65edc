"""Day two with the real Helm library: ``helm uninstall`` leaves the Inference Extension's CRDs, and every
InferencePool in them, in place (``helm.sh/resource-policy: keep``); the AscendInference CRD's upgrade path
(``kubectl apply --server-side --force-conflicts -f crds/``, then ``helm upgrade``) serves the new schema."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ascend_fleet.kube import wait_for
from tests.chart import helm
from tests.chart.installs import HELM_DRIVER, NAMESPACE, REAL, WATCHED, find
from tests.support.documents import inference

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


AINF_CRD = "ascendinferences.inference.ascendfleet.io"
NEW_FIELD = "safetyRules"  # a spec field the chart before it did not have


def older_chart(tmp: Path) -> Path:
    """A copy of the chart whose AscendInference CRD lacks a spec field, as a chart from before it did."""
    chart = tmp / helm.CHART.name
    shutil.copytree(helm.CHART, chart)
    path = next((chart / "crds").glob("inference.ascendfleet.io_*.yaml"))
    crd = yaml.safe_load(path.read_text())
    for version in crd["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop(NEW_FIELD)
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def spec_fields(api) -> set[str]:
    crds = api.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    stored = crds.get(name=AINF_CRD).to_dict()
    (version,) = stored["spec"]["versions"]
    return set(version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def create_dry_run(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """``kubectl create --dry-run=server`` of a spec with the new field: kubectl's strict field validation
    refuses a field the served schema lacks, and the answer shows what the API server keeps."""
    doc = inference("upgraded").namespace(WATCHED[0]).engine("vllm-ascend").spec(**{NEW_FIELD: False}).build()
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "create", "--dry-run=server", "-o", "json", "-f", "-"],
        input=json.dumps(doc), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def refused_as_unknown(kubeconfig: Path) -> bool:
    done = create_dry_run(kubeconfig)
    return done.returncode != 0 and f'unknown field "spec.{NEW_FIELD}"' in done.stderr


def kept(kubeconfig: Path) -> dict | None:
    done = create_dry_run(kubeconfig)
    return json.loads(done.stdout)["spec"] if done.returncode == 0 else None


@pytest.mark.skipif(not shutil.which("kubectl"), reason="the documented upgrade step runs kubectl")
@pytest.mark.skipif(
    not REAL, reason="upgrade reads the release record, which only Secrets keep across processes"
)
def test_the_documented_crd_upgrade_serves_the_new_schema(cluster, api, tmp_path):
    crds = api.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    if AINF_CRD in {c.metadata.name for c in crds.get().items}:  # from another test's install
        crds.delete(name=AINF_CRD)
        wait_for(lambda: AINF_CRD not in {c.metadata.name for c in crds.get().items}, 60, "the CRD to go")
    helm.install(cluster, "crd-upgrade", NAMESPACE, driver=HELM_DRIVER, chart=older_chart(tmp_path))
    assert NEW_FIELD not in spec_fields(api)
    # The old schema is served: the new field is unknown to it.
    wait_for(lambda: refused_as_unknown(cluster), 30, "the old schema to be served", interval=0.5)

    # helm upgrade alone leaves the CRD of crds/ as it was: the reason for the documented step.
    helm.upgrade(cluster, "crd-upgrade", NAMESPACE, driver=HELM_DRIVER)
    assert NEW_FIELD not in spec_fields(api)
    assert refused_as_unknown(cluster)

    # The documented step, then the upgrade (docs/install.md, "Upgrading the CRD").
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(helm.CHART / "crds"))
    assert NEW_FIELD in spec_fields(api)
    helm.upgrade(cluster, "crd-upgrade", NAMESPACE, driver=HELM_DRIVER)
    assert NEW_FIELD in spec_fields(api)  # and Helm does not take it back
    spec = wait_for(lambda: kept(cluster), 30, "the new schema to be served", interval=0.5)
    assert spec[NEW_FIELD] is False
    helm.uninstall(cluster, "crd-upgrade", NAMESPACE, driver=HELM_DRIVER)
    assert NEW_FIELD in spec_fields(api)  # crds/ is never deleted with the release
