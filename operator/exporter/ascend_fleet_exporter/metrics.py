"""The exporter's metric names, their help, and the exposition text for given per-device values (pure).

This module is the one place that knows the ``ascend_fleet_*`` names. The operator's metric catalog,
the simulated engines of ``ascend-fleet dev`` and the Grafana dashboard import the constants from
here, and the simulated engines render their ``/metrics`` with :func:`render_exposition`, so a
simulated engine and a real one cannot drift apart::

    from ascend_fleet_exporter.metrics import CONTENT_TYPE, DeviceSample, render_exposition

    body = render_exposition(
        {"0": DeviceSample(utilization_ratio=0.9, fragmentation_ratio=0.02, alloc_retries=0)},
        scrape_errors={"npu_smi": 0},
    )

Series carry one label, ``device`` (the NPU's logical id as the engine process sees it). Pod
identity (``namespace``, ``inference``, ``replica``, ``rank``, ``pod``) is attached by the scrape
side, from pod labels or file_sd target labels; emitting it here would collide with those.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

NPU_UTILIZATION_RATIO = "ascend_fleet_npu_utilization_ratio"
# One metric per core type rather than a `core` label: every exporter series keeps the single label `device`,
# and each maps one-to-one to an npu-exporter metric (docs/decisions.md).
NPU_AICUBE_UTILIZATION_RATIO = "ascend_fleet_npu_aicube_utilization_ratio"
NPU_AIVECTOR_UTILIZATION_RATIO = "ascend_fleet_npu_aivector_utilization_ratio"
NPU_AICPU_UTILIZATION_RATIO = "ascend_fleet_npu_aicpu_utilization_ratio"
HBM_BANDWIDTH_UTILIZATION_RATIO = "ascend_fleet_hbm_bandwidth_utilization_ratio"
HBM_USED_BYTES = "ascend_fleet_hbm_used_bytes"
HBM_TOTAL_BYTES = "ascend_fleet_hbm_total_bytes"
MEMORY_FRAGMENTATION_RATIO = "ascend_fleet_memory_fragmentation_ratio"
MEMORY_SLACK_RATIO = "ascend_fleet_memory_slack_ratio"
MEMORY_RESERVED_BYTES = "ascend_fleet_memory_reserved_bytes"
MEMORY_ALLOCATED_BYTES = "ascend_fleet_memory_allocated_bytes"
MEMORY_LARGEST_FREE_BLOCK_BYTES = "ascend_fleet_memory_largest_free_block_bytes"
ALLOC_RETRIES_TOTAL = "ascend_fleet_alloc_retries_total"
OOMS_TOTAL = "ascend_fleet_ooms_total"
EXPORTER_SCRAPE_ERRORS_TOTAL = "ascend_fleet_exporter_scrape_errors_total"
# 1, labelled with what the exporter reads NPUs through: "no NPU here" is not "no data".
EXPORTER_INFO = "ascend_fleet_exporter_info"

DEVICE_LABEL = "device"
COLLECTOR_LABEL = "collector"
BACKEND_LABEL = "backend"

# Values of the ``collector`` label of EXPORTER_SCRAPE_ERRORS_TOTAL.
COLLECTOR_TORCH_NPU = "torch_npu"
COLLECTOR_NPU_SMI = "npu_smi"
# The ``backend`` of EXPORTER_INFO when the engine's environment has no torch_npu (a host without NPUs);
# otherwise the collector the exporter reads NPUs through (COLLECTOR_TORCH_NPU, else COLLECTOR_NPU_SMI).
BACKEND_NONE = "none"

# The text format 0.0.4 that every Prometheus version parses; render_exposition produces it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class DeviceSample:
    """One NPU's exported values; ``None`` means unknown, and the series is left out rather than faked."""

    utilization_ratio: float | None = None
    hbm_used_bytes: float | None = None
    hbm_total_bytes: float | None = None
    fragmentation_ratio: float | None = None
    slack_ratio: float | None = None
    reserved_bytes: float | None = None
    allocated_bytes: float | None = None
    alloc_retries: float | None = None
    ooms: float | None = None
    largest_free_block_bytes: float | None = None
    # npu-smi lines that only some chip generations print (docs/exporter.md: which chip reports what).
    aicube_ratio: float | None = None
    aivector_ratio: float | None = None
    aicpu_ratio: float | None = None
    hbm_bandwidth_ratio: float | None = None


@dataclass(frozen=True)
class MetricSpec:
    """A per-device metric: its name, type, unit, one-line help and the :class:`DeviceSample` field it shows."""

    name: str
    kind: Literal["gauge", "counter"]
    unit: str
    help: str
    field: str


DEVICE_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        NPU_UTILIZATION_RATIO,
        "gauge",
        "ratio",
        "AICore utilization of the NPU, 0..1 (npu-smi Aicore Usage Rate / 100).",
        "utilization_ratio",
    ),
    MetricSpec(
        NPU_AICUBE_UTILIZATION_RATIO,
        "gauge",
        "ratio",
        "AI Cube (matrix unit) utilization of the NPU, 0..1 (npu-smi Aicube Usage Rate / 100); Atlas A2/A3 only.",
        "aicube_ratio",
    ),
    MetricSpec(
        NPU_AIVECTOR_UTILIZATION_RATIO,
        "gauge",
        "ratio",
        "AI Vector utilization of the NPU, 0..1 (npu-smi Aivector Usage Rate / 100); Atlas A2/A3 only.",
        "aivector_ratio",
    ),
    MetricSpec(
        NPU_AICPU_UTILIZATION_RATIO,
        "gauge",
        "ratio",
        "AI CPU utilization of the NPU, 0..1 (npu-smi Aicpu Usage Rate / 100).",
        "aicpu_ratio",
    ),
    MetricSpec(
        HBM_USED_BYTES,
        "gauge",
        "bytes",
        "HBM in use on the NPU by all processes (npu-smi HBM Capacity x HBM Usage Rate).",
        "hbm_used_bytes",
    ),
    MetricSpec(
        HBM_TOTAL_BYTES,
        "gauge",
        "bytes",
        "HBM capacity of the NPU (npu-smi HBM Capacity).",
        "hbm_total_bytes",
    ),
    MetricSpec(
        HBM_BANDWIDTH_UTILIZATION_RATIO,
        "gauge",
        "ratio",
        "HBM bandwidth in use as a share of the NPU's peak, 0..1 (npu-smi HBM Bandwidth Usage Rate / 100).",
        "hbm_bandwidth_ratio",
    ),
    MetricSpec(
        MEMORY_FRAGMENTATION_RATIO,
        "gauge",
        "ratio",
        "Share of reserved memory lost to split blocks: inactive_split_bytes / reserved_bytes, 0..1.",
        "fragmentation_ratio",
    ),
    MetricSpec(
        MEMORY_SLACK_RATIO,
        "gauge",
        "ratio",
        "Share of reserved memory not allocated to tensors: 1 - allocated_bytes / reserved_bytes, 0..1.",
        "slack_ratio",
    ),
    MetricSpec(
        MEMORY_RESERVED_BYTES,
        "gauge",
        "bytes",
        "Memory the engine's torch_npu caching allocator holds on the NPU.",
        "reserved_bytes",
    ),
    MetricSpec(
        MEMORY_ALLOCATED_BYTES,
        "gauge",
        "bytes",
        "Memory allocated to live tensors by the engine's torch_npu caching allocator.",
        "allocated_bytes",
    ),
    MetricSpec(
        MEMORY_LARGEST_FREE_BLOCK_BYTES,
        "gauge",
        "bytes",
        "Largest free block in the engine's torch_npu caching allocator (torch_npu memory_snapshot).",
        "largest_free_block_bytes",
    ),
    MetricSpec(
        ALLOC_RETRIES_TOTAL,
        "counter",
        "events",
        "Device allocations that failed and were retried after the allocator freed its cache.",
        "alloc_retries",
    ),
    MetricSpec(
        OOMS_TOTAL,
        "counter",
        "events",
        "Out-of-memory errors raised by the engine's torch_npu caching allocator.",
        "ooms",
    ),
)

SCRAPE_ERRORS_HELP = "Samples a collector of the exporter could not take or could not read completely."
INFO_HELP = "Always 1; backend says what the exporter reads NPUs through (none: no torch_npu, no NPU here)."

HELP: Mapping[str, str] = {
    **{spec.name: spec.help for spec in DEVICE_METRICS},
    EXPORTER_SCRAPE_ERRORS_TOTAL: SCRAPE_ERRORS_HELP,
}

# Every family of NPU readings, in exposition order (EXPORTER_INFO, about the exporter itself, comes first).
ALL_METRICS: tuple[str, ...] = tuple(HELP)


def render_exposition(
    samples: Mapping[str, DeviceSample],
    scrape_errors: Mapping[str, float] | None = None,
    backend: str | None = None,
) -> str:
    """The Prometheus text exposition (format 0.0.4, see :data:`CONTENT_TYPE`) for per-device values.

    ``samples`` maps a device id (the ``device`` label, e.g. ``"0"``) to its values; fields that are
    ``None`` produce no series. ``scrape_errors`` maps a collector name (:data:`COLLECTOR_TORCH_NPU`,
    :data:`COLLECTOR_NPU_SMI`) to its error count. Families without any series are left out. ``backend``,
    when given, adds :data:`EXPORTER_INFO` with that label.
    """
    families = [
        *info_families(backend),
        *device_families(samples),
        *scrape_error_families(scrape_errors or {}),
    ]
    return generate_latest(_Families(families)).decode("utf-8")


def info_families(backend: str | None) -> Iterator[Metric]:
    """The exporter's info gauge (value 1, label ``backend``), or nothing when no backend is given."""
    if backend is None:
        return
    family = GaugeMetricFamily(EXPORTER_INFO, INFO_HELP, labels=[BACKEND_LABEL])
    family.add_metric([backend], 1.0)
    yield family


def device_families(samples: Mapping[str, DeviceSample]) -> Iterator[Metric]:
    """One metric family per :data:`DEVICE_METRICS` entry that has at least one known value."""
    devices = sorted(samples, key=_device_order)
    for spec in DEVICE_METRICS:
        values = [(device, getattr(samples[device], spec.field)) for device in devices]
        known = [(device, value) for device, value in values if value is not None]
        if not known:
            continue
        family_type = GaugeMetricFamily if spec.kind == "gauge" else CounterMetricFamily
        family = family_type(spec.name, spec.help, labels=[DEVICE_LABEL])
        for device, value in known:
            family.add_metric([str(device)], float(value))
        yield family


def scrape_error_families(scrape_errors: Mapping[str, float]) -> Iterator[Metric]:
    """The scrape-error counter, one series per collector, or nothing when no collector ran."""
    if not scrape_errors:
        return
    family = CounterMetricFamily(EXPORTER_SCRAPE_ERRORS_TOTAL, SCRAPE_ERRORS_HELP, labels=[COLLECTOR_LABEL])
    for collector in sorted(scrape_errors):
        family.add_metric([collector], float(scrape_errors[collector]))
    yield family


def _device_order(device: str) -> tuple[int, int | str]:
    """Numeric ids in numeric order ("2" before "10"), anything else after them."""
    text = str(device)
    return (0, int(text)) if text.isdigit() else (1, text)


class _Families:
    """The smallest collector ``generate_latest`` accepts: a fixed list of families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families
