"""Metric names and the exposition text, read back with prometheus_client's parser."""

import dataclasses
import re

import pytest

from ascend_fleet_exporter import metrics
from ascend_fleet_exporter.metrics import DeviceSample, render_exposition

from .scrape import by_device, parse

# The names the issue, the operator's metric catalog and the dashboard rely on.
REQUIRED = {
    "ascend_fleet_npu_utilization_ratio",
    "ascend_fleet_npu_aicube_utilization_ratio",
    "ascend_fleet_npu_aivector_utilization_ratio",
    "ascend_fleet_npu_aicpu_utilization_ratio",
    "ascend_fleet_hbm_bandwidth_utilization_ratio",
    "ascend_fleet_hbm_used_bytes",
    "ascend_fleet_hbm_total_bytes",
    "ascend_fleet_memory_fragmentation_ratio",
    "ascend_fleet_memory_slack_ratio",
    "ascend_fleet_alloc_retries_total",
    "ascend_fleet_memory_reserved_bytes",
    "ascend_fleet_memory_allocated_bytes",
    "ascend_fleet_memory_largest_free_block_bytes",
    "ascend_fleet_ooms_total",
    "ascend_fleet_exporter_scrape_errors_total",
}


def test_every_required_name_has_a_constant_and_a_one_line_help():
    assert set(metrics.ALL_METRICS) == REQUIRED
    for name in metrics.ALL_METRICS:
        assert metrics.HELP[name] and "\n" not in metrics.HELP[name]
        assert re.fullmatch(r"ascend_fleet_[a-z_]+", name)


def test_every_device_sample_field_has_exactly_one_metric():
    specs = {spec.field for spec in metrics.DEVICE_METRICS}
    assert specs == {field.name for field in dataclasses.fields(DeviceSample)}
    assert len(specs) == len(metrics.DEVICE_METRICS)


def test_counters_end_in_total_and_units_match_names():
    for spec in metrics.DEVICE_METRICS:
        assert spec.name.endswith("_total") == (spec.kind == "counter")
        assert spec.name.endswith(f"_{spec.unit}") or spec.kind == "counter"


def test_exposition_round_trips_through_the_prometheus_parser():
    samples = {
        "0": DeviceSample(
            utilization_ratio=0.62,
            hbm_used_bytes=5e10,
            hbm_total_bytes=6.8719476736e10,
            fragmentation_ratio=0.25,
            slack_ratio=0.31,
            reserved_bytes=6.2e10,
            allocated_bytes=4.3e10,
            alloc_retries=12,
            ooms=1,
            aicube_ratio=0.44,
            aivector_ratio=0.23,
            aicpu_ratio=0.0,
            hbm_bandwidth_ratio=0.71,
        ),
        # A chip that prints no AI Cube, AI Vector or bandwidth line (a 910A).
        "1": DeviceSample(utilization_ratio=0.0, fragmentation_ratio=0.001, aicpu_ratio=0.02),
    }
    series = parse(render_exposition(samples, {"torch_npu": 0, "npu_smi": 3}))
    assert by_device(series, metrics.NPU_UTILIZATION_RATIO) == {"0": 0.62, "1": 0.0}
    assert by_device(series, metrics.MEMORY_FRAGMENTATION_RATIO) == {"0": 0.25, "1": 0.001}
    assert by_device(series, metrics.HBM_TOTAL_BYTES) == {
        "0": 68719476736.0
    }  # unknown for device 1: no series
    assert by_device(series, metrics.ALLOC_RETRIES_TOTAL) == {"0": 12.0}
    # Per core type: a type the chip does not report has no series, an idle one has 0.
    assert by_device(series, metrics.NPU_AICUBE_UTILIZATION_RATIO) == {"0": 0.44}
    assert by_device(series, metrics.NPU_AIVECTOR_UTILIZATION_RATIO) == {"0": 0.23}
    assert by_device(series, metrics.NPU_AICPU_UTILIZATION_RATIO) == {"0": 0.0, "1": 0.02}
    assert by_device(series, metrics.HBM_BANDWIDTH_UTILIZATION_RATIO) == {"0": 0.71}
    assert by_device(series, metrics.OOMS_TOTAL) == {"0": 1.0}
    assert series[metrics.EXPORTER_SCRAPE_ERRORS_TOTAL] == {
        (("collector", "npu_smi"),): 3.0,
        (("collector", "torch_npu"),): 0.0,
    }


def test_types_and_help_are_declared():
    text = render_exposition(
        {"0": DeviceSample(**{f.name: 1.0 for f in dataclasses.fields(DeviceSample)})}, {"x": 0}
    )
    for spec in metrics.DEVICE_METRICS:
        assert f"# TYPE {spec.name} {spec.kind}\n" in text
        assert f"# HELP {spec.name} {spec.help}\n" in text


def test_only_the_device_label_is_emitted():
    text = render_exposition({"3": DeviceSample(utilization_ratio=1.0)})
    assert 'ascend_fleet_npu_utilization_ratio{device="3"} 1.0' in text
    for label in ("namespace", "inference", "replica", "rank", "pod"):
        assert f"{label}=" not in text


def test_devices_sort_numerically():
    text = render_exposition({str(d): DeviceSample(utilization_ratio=0.5) for d in (10, 2, 0)})
    assert [line.split('"')[1] for line in text.splitlines() if line.startswith("ascend_fleet_")] == [
        "0",
        "2",
        "10",
    ]


def test_nothing_known_renders_nothing():
    assert render_exposition({}) == ""
    assert render_exposition({"0": DeviceSample()}) == ""


@pytest.mark.parametrize("value", [0, 1, 0.5, 68719476736, 1e-9])
def test_values_survive_exactly(value):
    series = parse(render_exposition({"0": DeviceSample(reserved_bytes=value)}))
    assert by_device(series, metrics.MEMORY_RESERVED_BYTES) == {"0": float(value)}
