"""The chart's CRDs: the AscendInference CRD is the checked-in one, byte for byte; kopf's peering CRDs are valid."""

from __future__ import annotations

import yaml
from kubernetes_validate import validate as k8s_validate

from tests.chart.helm import CHART
from tests.support.paths import CRD_FILE

CHART_CRDS = CHART / "crds"


def test_chart_crd_is_the_checked_in_crd():
    chart_copy = CHART_CRDS / CRD_FILE.name
    assert chart_copy.read_bytes() == CRD_FILE.read_bytes(), (
        f"{chart_copy.relative_to(CHART.parents[1])} differs from {CRD_FILE.relative_to(CHART.parents[1])}: "
        f"copy it (cp {CRD_FILE.relative_to(CHART.parents[1])} {CHART_CRDS.relative_to(CHART.parents[1])}/)"
    )


def test_chart_crds_are_exactly_these():
    assert sorted(p.name for p in CHART_CRDS.iterdir()) == sorted([CRD_FILE.name, "kopf.dev_peerings.yaml"])


def test_kopf_peering_crds():
    crds = list(yaml.safe_load_all((CHART_CRDS / "kopf.dev_peerings.yaml").read_text()))
    for crd in crds:
        k8s_validate(crd, "1.33", strict=True)
    by_kind = {crd["spec"]["names"]["kind"]: crd for crd in crds}
    assert by_kind.keys() == {"ClusterKopfPeering", "KopfPeering"}
    assert by_kind["ClusterKopfPeering"]["spec"]["scope"] == "Cluster"
    assert by_kind["KopfPeering"]["spec"]["scope"] == "Namespaced"
    for crd in crds:
        # kopf's selectors: kopf.dev/v1 clusterkopfpeerings and kopfpeerings; peers patch .status directly.
        assert crd["spec"]["group"] == "kopf.dev"
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.kopf.dev"
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1"]
        assert "subresources" not in crd["spec"]["versions"][0]
