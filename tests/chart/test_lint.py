"""`helm lint` with the real Helm library, with the default values and with every option on."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.chart import helm


def problems(messages: list[helm.LintMessage]) -> list[str]:
    # INFO is only "icon is recommended"; warnings and errors fail.
    return [f"{m.severity} in {m.path}" for m in messages if m.severity not in ("INFO",)]


def test_lint_with_default_values():
    assert problems(helm.lint()) == []


@pytest.mark.parametrize("name", ["all-options", "namespaced", "clusterwide-peering"])
def test_lint_with_options(name):
    assert problems(helm.lint(helm.values_file(name))) == []


def test_lint_finds_a_broken_template(tmp_path, monkeypatch):
    """Lint must be able to fail: a template that reads a missing value is an error in templates/."""
    chart = tmp_path / helm.CHART.name
    shutil.copytree(helm.CHART, chart)
    broken = chart / "templates" / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.no.such.key }}\n")
    monkeypatch.setattr(helm, "CHART", chart)
    assert "ERROR in templates/" in problems(helm.lint())


def test_chart_metadata():
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "ascend-fleet" and chart["type"] == "application"
    project = (helm.CHART.parents[1] / "pyproject.toml").read_text()
    assert f'version = "{chart["appVersion"]}"' in project, "appVersion must be the package version"
