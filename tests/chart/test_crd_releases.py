"""Every CRD the chart ships is accepted by the API server of the lowest supported Kubernetes minor and of 1.34.

The arbiter is the API server's own CRD validation of each release (``tools/crdcheck``: structural schema,
CEL compilation and the CEL cost estimator's per-rule and per-CRD budgets), which differs between releases:
docs/decisions.md, "The chart's kubeVersion". The lowest minor is the chart's ``kubeVersion`` floor.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.chart import helm
from tests.support.apiextensions import validate_crds
from tests.support.paths import CRD_FILE

FLOOR = re.fullmatch(
    r">=(\d+\.\d+)\.0-0", yaml.safe_load((helm.CHART / "Chart.yaml").read_text())["kubeVersion"]
)
assert FLOOR, "the chart's kubeVersion is a floor such as >=1.30.0-0"
LOWEST = FLOOR.group(1)
CHART_CRDS = sorted((helm.CHART / "crds").glob("*.yaml"))

# The `for` rule as it was before it was rewritten for 1.30's estimator: a matches() and a replace() on an
# int-or-string node, which that estimator sizes at the largest request whatever its maxLength.
UNBOUNDED_FOR_RULE = (
    "type(self) == int ? self <= 86400 : (self.matches('^([0-9]{1,5}(\\\\.[0-9]+)?h|[0-9]{1,7}(\\\\.[0-9]+)?"
    "(min|m)|[0-9]{1,9}(\\\\.[0-9]+)?s|[0-9]{1,12}(\\\\.[0-9]+)?ms)+$') && "
    "duration(self.replace('min', 'm')) <= duration('86400s'))"
)


@pytest.mark.parametrize("minor", sorted({LOWEST, "1.34"}))
def test_every_crd_of_the_chart_is_accepted(minor):
    verdicts = validate_crds(minor, *CHART_CRDS)
    names = [doc["metadata"]["name"] for p in CHART_CRDS for doc in yaml.safe_load_all(p.read_text()) if doc]
    assert [v.name for v in verdicts] == names
    for verdict in verdicts:
        assert verdict.release.startswith(f"v0.{minor.split('.')[1]}."), verdict.release
        assert verdict.errors == [], f"{verdict.name} refused at {verdict.release}:\n" + "\n".join(
            verdict.errors
        )


def test_the_checker_refuses_what_an_older_estimator_refuses(tmp_path):
    """The rule before the rewrite: accepted at 1.34, refused at 1.30 for its cost, on the `for` node."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    window = schema["properties"]["spec"]["properties"]["rules"]["items"]["properties"]["for"]
    window["x-kubernetes-validations"][0]["rule"] = UNBOUNDED_FOR_RULE
    old = tmp_path / "crd.yaml"
    old.write_text(yaml.safe_dump(crd))
    [accepted] = validate_crds("1.34", old)
    assert accepted.errors == []
    [refused] = validate_crds("1.30", old)
    assert any(
        "properties[for].x-kubernetes-validations[0].rule" in e and "estimated rule cost exceeds budget" in e
        for e in refused.errors
    ), refused.errors
