"""The Grafana dashboard: valid JSON, complete, and reading only metrics the project (or its engines) export."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from ascend_fleet_exporter import metrics as exporter
from tests.chart.helm import CHART
from tests.chart.promql import (
    check_expressions,
    exported_metric_names,
    grafana_to_promql,
    metric_names,
    promtool,
)

DASHBOARD_FILE = CHART / "files" / "dashboards" / "ascend-fleet.json"


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_FILE.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} target {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            yield f"variable {variable['name']!r}", query["query"] if isinstance(query, dict) else query


def test_dashboard_identity_and_layout(dashboard):
    assert dashboard["uid"] == "ascend-fleet" and dashboard["title"]
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, (
            f"{panel['title']} overflows the 24-column grid"
        )
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel.get("targets"), f"{panel['title']} has no query"
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "namespace", "inference"]


@pytest.mark.parametrize(
    "words",
    [
        ("fleet replicas",),
        ("npu utilization", "replica"),
        ("fragmentation",),
        ("queue depth",),
        ("time to first token",),
        ("decisions",),
        # The seeds' four panels and their cost figure.
        ("npu utilization", "core type"),
        ("hbm bandwidth saturation",),
        ("request queue depth",),
        ("memory fragmentation index",),
        ("tokens per npu-hour", "fleet"),
    ],
)
def test_dashboard_has_the_panels_the_issue_asks_for(dashboard, words):
    titles = [panel["title"].lower() for panel in panels(dashboard)]
    assert any(all(word in title for word in words) for title in titles), f"no panel about {' '.join(words)}"


def test_queries_read_only_exported_metrics(dashboard):
    exported = exported_metric_names()
    unknown = {
        f"{where}: {name}"
        for where, expr in queries(dashboard)
        for name in metric_names(grafana_to_promql(expr))
        if name not in exported
    }
    assert not unknown, "the dashboard reads metrics nobody exports:\n" + "\n".join(sorted(unknown))


def test_fleet_panels_filter_by_the_selected_fleet(dashboard):
    for where, expr in queries(dashboard):
        reads_fleet_series = any(
            name.startswith(
                (
                    "ascend_fleet_npu",
                    "ascend_fleet_memory",
                    "ascend_fleet_hbm",
                    "vllm:",
                    "sglang:",
                    "ascend_fleet_operator_replicas",
                )
            )
            for name in metric_names(grafana_to_promql(expr))
        )
        if reads_fleet_series and where.startswith("panel"):
            assert 'namespace=~"$namespace"' in expr and 'inference=~"$inference"' in expr, where


def panel(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    return next(p for p in panels(dashboard) if p["title"] == title)


def read_names(target: dict[str, Any]) -> set[str]:
    return metric_names(grafana_to_promql(target["expr"]))


def test_the_core_type_panel_reads_each_core_type_and_the_bandwidth_panel_its_ratio(dashboard):
    cores = panel(dashboard, "NPU utilization per core type")
    assert [read_names(t) for t in cores["targets"]] == [
        {exporter.NPU_UTILIZATION_RATIO},
        {exporter.NPU_AICUBE_UTILIZATION_RATIO},
        {exporter.NPU_AIVECTOR_UTILIZATION_RATIO},
        {exporter.NPU_AICPU_UTILIZATION_RATIO},
    ]
    assert [t["legendFormat"].split()[-2:] for t in cores["targets"]] == [
        ["AI", "Core"],
        ["AI", "Cube"],
        ["AI", "Vector"],
        ["AI", "CPU"],
    ]
    [bandwidth] = panel(dashboard, "HBM bandwidth saturation per replica")["targets"]
    assert read_names(bandwidth) == {exporter.HBM_BANDWIDTH_UTILIZATION_RATIO}
    for ratio_panel in (cores, panel(dashboard, "HBM bandwidth saturation per replica")):
        defaults = ratio_panel["fieldConfig"]["defaults"]
        assert (defaults["unit"], defaults["min"], defaults["max"]) == ("percentunit", 0, 1)


def test_tokens_per_npu_hour_divide_generated_tokens_by_the_fleets_npus(dashboard):
    targets = panel(dashboard, "Tokens per NPU-hour per fleet")["targets"]
    assert [read_names(t) for t in targets] == [
        {"vllm:generation_tokens_total", exporter.HBM_TOTAL_BYTES},
        {"sglang:generation_tokens_total", exporter.HBM_TOTAL_BYTES},
    ]
    for target in targets:
        assert "* 3600 / count by (namespace, inference) (ascend_fleet_hbm_total_bytes" in target["expr"]


def fills_absence(expr: str) -> bool:
    """Whether an expression turns "no series" into a number (an absent reading would read as 0)."""
    return bool(re.search(r"\bor\b[^()]*(\(\s*\))?\s*(vector|absent)\s*\(", expr)) or "absent(" in expr


def test_absent_readings_are_shown_as_absent_not_zero(dashboard):
    assert fills_absence("sum(x) or vector(0)") and fills_absence("x or on() vector(0)")
    assert not fills_absence("sum(x) or sum(y)")
    for where, expr in queries(dashboard):
        assert not fills_absence(expr), where
    for title in ("NPU utilization per core type", "HBM bandwidth saturation per replica"):
        assert panel(dashboard, title)["fieldConfig"]["defaults"]["noValue"] == "not reported"


def test_metric_name_extraction_sees_through_promql():
    """The checker above must catch an unknown name wherever PromQL puts it (so that test can fail)."""
    expr = (
        'histogram_quantile(0.9, sum by (le) (rate(not_exported_seconds_bucket{job="x"}[5m]))) '
        "/ on (namespace) group_left sum without (device) (other_metric offset 5m) > bool 1e3"
    )
    assert metric_names(expr) == {"not_exported_seconds_bucket", "other_metric"}


@pytest.mark.skipif(promtool() is None, reason="needs promtool (Debian: apt-get install prometheus)")
def test_queries_are_valid_promql(dashboard):
    exprs = [grafana_to_promql(expr) for _, expr in queries(dashboard)]
    assert check_expressions(exprs) == ""
    assert check_expressions(["sum(rate(x[5m])"]) != "", "promtool must reject broken PromQL"
