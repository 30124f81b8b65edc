"""The chart's Kubernetes range: the real Helm library installs it where the API server reports the lowest
supported release and refuses the release below, and what the chart and the operator create is valid there.

Helm checks ``kubeVersion`` against the version the API server reports, as ``helm template --kube-version``
checks it against the flag; the local emulator reports the release it is given.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from ascend_fleet.render import render_all, validate
from tests.chart import helm
from tests.chart.installs import NAMESPACE, NOT_BUILT_IN
from tests.support.paths import EXAMPLES

KUBE_VERSION = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())["kubeVersion"]
# docs/decisions.md, "The chart's kubeVersion": the lowest minor whose own control plane runs the suite of
# make test-oldest-kube green.
LOWEST = "1.30"
BELOW = "1.29"


def test_the_range_is_the_lowest_supported_release_and_up():
    assert f">={LOWEST}.0-0" == KUBE_VERSION


def install_where_the_server_reports(version: str, tmp_path: Path) -> helm.Release:
    from kubernetes import client, config

    from ascend_fleet_dev.cluster import DevCluster

    with DevCluster(nodes=1, kube_version=version, kubeconfig=tmp_path / "kubeconfig") as cluster:
        api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
        client.CoreV1Api(api_client).create_namespace({"metadata": {"name": NAMESPACE}})
        assert client.VersionApi(api_client).get_code().git_version.startswith(f"v{version}-")
        return helm.install(
            cluster.kubeconfig_path, "range", NAMESPACE, {"inferenceExtension": {"installCRDs": True}}
        )


def test_helm_installs_the_chart_on_the_lowest_release_and_its_objects_are_valid_there(tmp_path):
    release = install_where_the_server_reports(f"{LOWEST}.0", tmp_path)
    kinds = {o["kind"] for o in release.objects}
    assert {"Deployment", "ClusterRole", "CustomResourceDefinition"} <= kinds
    for obj in release.objects:
        if obj["apiVersion"] not in NOT_BUILT_IN and obj["kind"] != "CustomResourceDefinition":
            k8s_validate(obj, LOWEST, strict=True)


@pytest.mark.parametrize("patch", ["0", "6"])
def test_helm_refuses_the_release_below(tmp_path, patch):
    with pytest.raises(helm.HelmFailed) as refused:
        install_where_the_server_reports(f"{BELOW}.{patch}", tmp_path)
    assert re.search(
        rf"chart requires kubeVersion: {re.escape(KUBE_VERSION)} which is incompatible with Kubernetes "
        rf"v{re.escape(BELOW)}\.{patch}",
        str(refused.value),
    ), str(refused.value)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_what_the_operator_creates_for_each_example_is_valid_on_the_lowest_release(path):
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "AscendInference":
            doc.setdefault("metadata", {}).setdefault("namespace", "default")
            for child in render_all(validate(doc).obj):
                if child["apiVersion"].split("/")[0] in ("v1", "apps", "policy", "rbac.authorization.k8s.io"):
                    k8s_validate(child, LOWEST, strict=True)
