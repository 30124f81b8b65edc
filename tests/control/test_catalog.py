"""The metric catalog: presets, operator entries, and the reconciler rejecting unknown metric names."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_fleet.api.catalog import PRESETS, Catalog, role_expression
from ascend_fleet.api.settings import ControlSettings
from ascend_fleet.reconcile.apply import known_metrics
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet_exporter import metrics
from tests.support.documents import inference

BRIEF_METRICS = {"npu_utilization", "mem_fragmentation", "queue_depth", "kv_cache_usage"}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_has_the_rule_vocabulary_and_groups_by_replica(preset):
    catalog = Catalog.build(preset)
    assert catalog.names() >= BRIEF_METRICS
    for expression in catalog.promql().values():
        # Quantiles group by the bucket bound too ("replica, le"), which histogram_quantile then removes.
        assert "by (namespace, inference, pd_role, replica" in expression


def test_presets_read_their_own_metric_names():
    assert "ascend_fleet_npu_utilization_ratio" in Catalog.build("ascend-fleet").expression("npu_utilization")
    npu_exporter = Catalog.build("npu-exporter")
    assert "npu_chip_info_utilization" in npu_exporter.expression("npu_utilization")
    # Only the project's exporter measures fragmentation.
    assert "ascend_fleet_memory_fragmentation_ratio" in npu_exporter.expression("mem_fragmentation")
    assert "vllm:num_requests_waiting" in npu_exporter.expression("queue_depth")


SATURATION_METRICS = {
    "aicube_utilization",
    "aivector_utilization",
    "aicpu_utilization",
    "hbm_bandwidth_saturation",
}


def test_the_core_types_and_hbm_bandwidth_read_each_presets_names():
    own = Catalog.build("ascend-fleet")
    assert own.names() >= SATURATION_METRICS
    assert metrics.NPU_AICUBE_UTILIZATION_RATIO in own.expression("aicube_utilization")
    assert metrics.NPU_AIVECTOR_UTILIZATION_RATIO in own.expression("aivector_utilization")
    assert metrics.NPU_AICPU_UTILIZATION_RATIO in own.expression("aicpu_utilization")
    assert own.expression("hbm_bandwidth_saturation").startswith(
        "max by (namespace, inference, pd_role, replica)"
    )
    assert metrics.HBM_BANDWIDTH_UTILIZATION_RATIO in own.expression("hbm_bandwidth_saturation")
    npu_exporter = Catalog.build("npu-exporter")
    assert 'npu_chip_info_cube_utilization{pod_name!=""} / 100' in npu_exporter.expression(
        "aicube_utilization"
    )
    assert "npu_chip_info_vector_utilization" in npu_exporter.expression("aivector_utilization")
    assert "npu_chip_info_hbm_bandwidth_utilization" in npu_exporter.expression("hbm_bandwidth_saturation")
    # npu-exporter has no AI CPU gauge: the entry stays the project's exporter's.
    assert npu_exporter.expression("aicpu_utilization") == own.expression("aicpu_utilization")


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_tpot_reads_each_engines_own_histogram_per_role(preset):
    expression = Catalog.build(preset).expression("tpot_p99")
    assert expression is not None
    quantiles = expression.split(" or ")
    assert quantiles == [
        "histogram_quantile(0.99, sum by (namespace, inference, pd_role, replica, le) "
        f"(rate({histogram}_bucket[1m])))"
        for histogram in ("vllm:request_time_per_output_token_seconds", "sglang:inter_token_latency_seconds")
    ]
    # A decode rule keeps the decode series only.
    assert 'pd_role="decode"' in role_expression(expression, "decode")


def test_a_decode_rule_on_tpot_takes_a_duration():
    doc = (
        inference("pd")
        .engine("vllm-ascend")
        .merge(
            disaggregation={
                "prefill": {"parallelism": {"tensor": 2}},
                "decode": {"parallelism": {"tensor": 2}},
            }
        )
        .build()
    )
    doc["spec"]["rules"] = [
        {"metric": "tpot_p99", "threshold": "100ms", "for": "2m", "action": "scale_up", "role": "decode"}
    ]
    (rule,) = validate(doc, known_metrics=known_metrics(ControlSettings())).obj.spec.rules
    assert rule.threshold == pytest.approx(0.1) and rule.describe().startswith("tpot_p99 > 100ms for 2m")


def test_every_catalog_entry_is_documented():
    page = (Path(__file__).parents[2] / "docs" / "control-loop.md").read_text()
    for preset in sorted(PRESETS):
        for name in Catalog.build(preset).names():
            assert f"`{name}`" in page, f"{name} ({preset}) is not in docs/control-loop.md"


def test_operator_entries_add_and_replace():
    catalog = Catalog.build(overrides={"ttft": "x", "npu_utilization": " y "})
    assert catalog.expression("ttft") == "x" and catalog.expression("npu_utilization") == "y"
    with pytest.raises(ValueError, match="unknown catalog preset"):
        Catalog.build("nope")


def _doc(metric: str) -> dict:
    return (
        inference("qwen", "qwen", "/models/q")
        .namespace("team-a")
        .engine("vllm-ascend")
        .rule("npu_utilization", "85%", "scale_up")
        .rule(metric, 0.5, "notify", window="1m")
        .build()
    )


def test_the_reconciler_rejects_a_rule_with_an_unknown_metric_and_names_the_known_ones():
    known = known_metrics(ControlSettings())
    with pytest.raises(InvalidSpec) as error:
        validate(_doc("gpu_util"), known_metrics=known)
    [problem] = error.value.problems
    assert problem.startswith("spec.rules[1].metric: unknown metric 'gpu_util'")
    assert "mem_fragmentation" in problem and "query" in problem
    validate(_doc("gpu_util"))  # without a catalog (offline) the name is not checked
    custom = known_metrics(ControlSettings(catalog={"gpu_util": "up"}))
    validate(_doc("gpu_util"), known_metrics=custom)


def test_the_drift_signal_is_a_slope_of_reserved_bytes_per_hour_of_capacity_in_both_presets():
    for preset in sorted(PRESETS):
        expression = Catalog.build(preset).expression("hbm_reserved_growth")
        assert expression is not None
        assert "deriv(ascend_fleet_memory_reserved_bytes[6h])" in expression
        assert "* 3600 / ascend_fleet_hbm_total_bytes" in expression


def test_a_day_long_rule_on_the_drift_signal_fits_the_window_cap():
    doc = (
        inference("qwen", "qwen", "/models/q")
        .namespace("team-a")
        .engine("vllm-ascend")
        .rule("hbm_reserved_growth", "2%", "restart_service", window="24h")
        .build()
    )
    validate(doc, known_metrics=known_metrics(ControlSettings()))
    too_long = (
        inference("qwen", "qwen", "/models/q")
        .namespace("team-a")
        .engine("vllm-ascend")
        .rule("hbm_reserved_growth", "2%", "restart_service", window="25h")
        .build()
    )
    with pytest.raises(InvalidSpec, match="24h"):
        validate(too_long, known_metrics=known_metrics(ControlSettings()))
