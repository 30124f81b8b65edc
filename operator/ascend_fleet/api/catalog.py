"""The metric catalog: logical metric names that rules refer to, and the PromQL behind each.

Every entry is a PromQL expression whose series carry ``namespace``, ``inference`` and ``replica``
labels, one series per replica (the control loop aggregates them further for fleet-scoped rules), and keep
``pd_role`` where the scrape gives it (the pods of a two-role fleet): a rule with a ``role`` reads the series of
that role only (:func:`role_expression`).
Ratios are 0..1, so a rule's ``"85%"`` threshold compares directly.

Why this module lives in ``api``: a rule's ``metric`` field names a catalog entry, so the catalog is
part of the vocabulary of the API, like the settings object that selects a preset. Both the
reconciler (which rejects a rule naming an unknown metric as ``InvalidSpec``) and the control loop
(which turns entries into queries) need it, and the import layers forbid them to import each other;
``api`` is below both. It is pure data and string handling: no client, no I/O.

Two presets:

- ``ascend-fleet``: the project's engine exporter (``ascend_fleet_*`` per device, labelled by the scrape
  with namespace/inference/replica/rank/pod) and the engines' own vLLM or SGLang queue metrics;
- ``npu-exporter``: NPU utilization and HBM from Huawei's npu-exporter (``npu_chip_info_*``, per chip,
  labelled ``namespace``/``pod_name``), joined to replicas through kube-state-metrics' ``kube_pod_labels``.
  Fragmentation and AI CPU utilization exist only in the project's exporter, so those entries are the same
  in both presets.

Operators add or replace entries through ``control.catalog`` in the operator configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..engines.registry import builtin_facts
from .query_scope import NAMESPACE_LABEL
from .units import format_seconds, format_threshold, is_duration_text, is_percent_text

PRESET_ASCEND_FLEET = "ascend-fleet"
PRESET_NPU_EXPORTER = "npu-exporter"

# The labels every catalog series carries; the control loop groups by them.
REPLICA_LABELS = (NAMESPACE_LABEL, "inference", "replica")
# The series label the scrape copies from a pod's prefill/decode role (names.LABEL_PD_ROLE); absent on the
# series of a fleet of one role. Entries group by it too, so that a replica index (which each role counts from
# 0) never mixes the two roles' pods, and a role-scoped rule can keep its role's series.
PD_ROLE_LABEL = "pd_role"
_BY = "by (namespace, inference, pd_role, replica)"


def _either(aggregation: str, *metrics: str) -> str:
    """One replica series from whichever engine's metric exists (vLLM or SGLang), never both."""
    return " or ".join(f"{aggregation} {_BY} ({metric})" for metric in metrics)


# Each engine's own series, in the order of the production engines (the metric names are the engines' facts).
_METRICS = [facts.metrics for facts in builtin_facts()]

# Engine metrics: only the leader (rank 0) serves them, so sum/max over a replica is that pod's. Queue gauges
# carry their selectors in the facts (SGLang's total is the series with priority="").
_ENGINE_ENTRIES = {
    "queue_depth": _either("sum", *(m.queue_depth for m in _METRICS)),
    "running_requests": _either("sum", *(m.running_requests for m in _METRICS)),
    "kv_cache_usage": _either("max", *(m.kv_cache_usage for m in _METRICS)),
}

# Request KPIs from the engines' own histograms, over the last minute (the seeds' "requests over 1 s"):
# the 99th percentile of time to first token, of time per output token and of time waiting in the engine's
# queue, and the share of
# requests whose end-to-end latency exceeded one second (1.0 is a bucket bound in both engines).
REQUEST_RATE_WINDOW = "1m"
_BY_LE = "by (namespace, inference, pd_role, replica, le)"


def _p99(*histograms: str) -> str:
    return " or ".join(
        f"histogram_quantile(0.99, sum {_BY_LE} (rate({name}_bucket[{REQUEST_RATE_WINDOW}])))"
        for name in histograms
    )


def _share_over_one_second(*histograms: str) -> str:
    return " or ".join(
        f'(1 - sum {_BY} (rate({name}_bucket{{le="1.0"}}[{REQUEST_RATE_WINDOW}])) '
        f"/ sum {_BY} (rate({name}_count[{REQUEST_RATE_WINDOW}])))"
        for name in histograms
    )


_REQUEST_ENTRIES = {
    "ttft_p99": _p99(*(m.ttft_histogram for m in _METRICS)),
    "queue_time_p99": _p99(*(m.queue_time_histogram for m in _METRICS)),
    # Time per output token after the first: a decode role's signal, as TTFT is a prefill role's.
    "tpot_p99": _p99(*(m.tpot_histogram for m in _METRICS)),
    "slow_request_share": _share_over_one_second(*(m.e2e_latency_histogram for m in _METRICS)),
}

# Slow leaks: the least-squares slope of the allocator's reserved bytes over hours, per hour, as a share of
# the device's capacity (0.02 = 2 % of HBM more each hour), worst device of the replica. deriv() fits a line
# through every sample, so one burst does not fire it the way a delta() of two points would; a restart drops
# reserved bytes and so makes the slope negative, which clears the rule until the leak builds up again. The
# range is hours, not the rule window: a rule's `for` (at most 24 h) then says how long the slope must stay up.
GROWTH_WINDOW = "6h"

# The project's exporter: per device; a replica is as fragmented as its worst device and as busy as its mean.
_EXPORTER_ENTRIES = {
    "npu_utilization": f"avg {_BY} (ascend_fleet_npu_utilization_ratio)",
    "mem_fragmentation": f"max {_BY} (ascend_fleet_memory_fragmentation_ratio)",
    "memory_slack": f"max {_BY} (ascend_fleet_memory_slack_ratio)",
    "hbm_usage": f"max {_BY} (ascend_fleet_hbm_used_bytes / ascend_fleet_hbm_total_bytes)",
    # Per core type, where the chip reports it (a 910A has no cube or vector line: no series, no value).
    "aicube_utilization": f"avg {_BY} (ascend_fleet_npu_aicube_utilization_ratio)",
    "aivector_utilization": f"avg {_BY} (ascend_fleet_npu_aivector_utilization_ratio)",
    "aicpu_utilization": f"avg {_BY} (ascend_fleet_npu_aicpu_utilization_ratio)",
    # The worst device: one rank stalled on HBM bandwidth holds back the whole tensor-parallel step.
    "hbm_bandwidth_saturation": f"max {_BY} (ascend_fleet_hbm_bandwidth_utilization_ratio)",
    "hbm_reserved_growth": f"max {_BY} (deriv(ascend_fleet_memory_reserved_bytes[{GROWTH_WINDOW}]) "
    "* 3600 / ascend_fleet_hbm_total_bytes)",
}

# kube-state-metrics exposes pod labels as label_<sanitized key> once allowed with
# --metric-labels-allowlist=pods=[inference.ascendfleet.io/name,inference.ascendfleet.io/replica,
# inference.ascendfleet.io/pd-role].
POD_REPLICA_LABELS = (
    "max by (namespace, pod, inference, pd_role, replica) ("
    "label_replace(label_replace(label_replace("
    'kube_pod_labels{label_inference_ascendfleet_io_name!=""}, '
    '"inference", "$1", "label_inference_ascendfleet_io_name", "(.+)"), '
    '"replica", "$1", "label_inference_ascendfleet_io_replica", "(.+)"), '
    '"pd_role", "$1", "label_inference_ascendfleet_io_pd_role", "(.+)"))'
)


def _npu_exporter(expression: str) -> str:
    """Per-chip npu-exporter series (labelled pod_name) joined to the replica of the pod that holds the chip."""
    return (
        f'label_replace({expression}, "pod", "$1", "pod_name", "(.+)") '
        f"* on (namespace, pod) group_left (inference, pd_role, replica) {POD_REPLICA_LABELS}"
    )


_UTILIZATION_PERCENT = 'npu_chip_info_utilization{pod_name!=""} / 100'  # AICore %, as a ratio
_HBM_RATIO = 'npu_chip_info_hbm_used_memory{pod_name!=""} / npu_chip_info_hbm_total_memory'
# npu-exporter's per-core-type and bandwidth gauges are percentages too; it has no AI CPU gauge.
_CUBE_PERCENT = 'npu_chip_info_cube_utilization{pod_name!=""} / 100'
_VECTOR_PERCENT = 'npu_chip_info_vector_utilization{pod_name!=""} / 100'
_HBM_BANDWIDTH_PERCENT = 'npu_chip_info_hbm_bandwidth_utilization{pod_name!=""} / 100'
_NPU_EXPORTER_ENTRIES = {
    "npu_utilization": f"avg {_BY} ({_npu_exporter(_UTILIZATION_PERCENT)})",
    "hbm_usage": f"max {_BY} ({_npu_exporter(_HBM_RATIO)})",
    "aicube_utilization": f"avg {_BY} ({_npu_exporter(_CUBE_PERCENT)})",
    "aivector_utilization": f"avg {_BY} ({_npu_exporter(_VECTOR_PERCENT)})",
    "hbm_bandwidth_saturation": f"max {_BY} ({_npu_exporter(_HBM_BANDWIDTH_PERCENT)})",
}

# Signals the operator reads from the Kubernetes API rather than from Prometheus, answered by the control loop
# (control.npu_health: the Ascend device plugin's health ConfigMaps). Their entry is a marker, not PromQL; an
# operator's control.catalog may replace one with PromQL, which Prometheus then answers like any other entry.
OPERATOR_SIGNAL_PREFIX = "ascend-fleet-operator:"
NPU_UNHEALTHY = "npu_unhealthy"
_OPERATOR_ENTRIES = {NPU_UNHEALTHY: OPERATOR_SIGNAL_PREFIX + NPU_UNHEALTHY}


# Entries that count things (requests, NPUs) rather than measure a ratio: their values are shown as numbers.
COUNTS = frozenset({"queue_depth", "running_requests", NPU_UNHEALTHY})


# Entries in seconds (latencies): a rule may write their threshold as a duration (``1s``, ``500ms``).
SECONDS = frozenset({"ttft_p99", "tpot_p99", "queue_time_p99"})


def format_value(metric: str | None, value: float) -> str:
    """A metric's value as a user reads it: a count as a number, a latency as a duration, a ratio as a
    percentage."""
    if metric in COUNTS:
        return f"{value:g}"
    return format_seconds(value) if metric in SECONDS else format_threshold(value)


# How an operator-read signal's marker names the role it is read for: ``ascend-fleet-operator:npu_unhealthy@decode``.
SIGNAL_ROLE_SEPARATOR = "@"


def role_expression(expression: str, role: str) -> str:
    """An entry (or a rule's query) restricted to the series of one role of a two-role fleet.

    The engine pods' ``up`` carries the role the scrape copied from the pod, so the entry's series are kept where
    an ``up`` of that role has the same namespace, inference and role: one query for all objects, per role. An
    operator-read signal stays a marker, naming the role its answer is read for (:func:`signal_role`).
    """
    if operator_signal(expression) is not None:
        return f"{expression}{SIGNAL_ROLE_SEPARATOR}{role}"
    keys = f"{NAMESPACE_LABEL}, inference, {PD_ROLE_LABEL}"
    return f'({expression}) and on ({keys}) group by ({keys}) (up{{{PD_ROLE_LABEL}="{role}"}})'


def operator_signal(expression: str) -> str | None:
    """The operator-read signal an entry stands for (None: the entry is PromQL)."""
    return signal_role(expression)[0]


def signal_role(expression: str) -> tuple[str | None, str | None]:
    """The operator-read signal a marker stands for and the role it is read for (None, None: PromQL)."""
    if not expression.startswith(OPERATOR_SIGNAL_PREFIX):
        return None, None
    signal, _, role = expression.removeprefix(OPERATOR_SIGNAL_PREFIX).partition(SIGNAL_ROLE_SEPARATOR)
    return signal, role or None


# The PromQL entries of each preset; every catalog also has the operator-read signals.
PRESETS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        PRESET_ASCEND_FLEET: MappingProxyType({**_EXPORTER_ENTRIES, **_ENGINE_ENTRIES, **_REQUEST_ENTRIES}),
        PRESET_NPU_EXPORTER: MappingProxyType(
            {**_EXPORTER_ENTRIES, **_ENGINE_ENTRIES, **_REQUEST_ENTRIES, **_NPU_EXPORTER_ENTRIES}
        ),
    }
)


# Every name a built-in catalog knows, whatever the preset: their units are the project's to say.
BUILTIN_NAMES = frozenset(_OPERATOR_ENTRIES).union(*PRESETS.values())


def threshold_unit_problem(metric: str | None, threshold: object) -> str | None:
    """Why a rule's threshold as written does not fit its built-in metric's unit, or None when it fits.

    A duration (``1s``) is seconds: it fits a latency entry (SECONDS), a raw query or an operator's own entry,
    whose unit the project cannot know. A percentage fits a ratio or those others, not a count or a latency.
    """
    if metric is None or metric not in BUILTIN_NAMES:
        return None
    if is_duration_text(threshold) and metric not in SECONDS:
        kind = "a count" if metric in COUNTS else "a ratio from 0 to 1"
        return (
            f"threshold {threshold!r} is a duration, but {metric} is {kind}, not a latency; write a number "
            f"or a percentage (durations fit {', '.join(sorted(SECONDS))})"
        )
    if is_percent_text(threshold) and metric in SECONDS | COUNTS:
        kind = (
            "a latency in seconds; write a duration such as 1s or 500ms"
            if metric in SECONDS
            else ("a count; write a number such as 4")
        )
        return f"threshold {threshold!r} is a percentage, but {metric} is {kind}"
    return None


@dataclass(frozen=True)
class Catalog:
    """Logical metric name -> PromQL expression with one series per replica."""

    entries: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, preset: str = PRESET_ASCEND_FLEET, overrides: Mapping[str, str] | None = None) -> Catalog:
        """A preset's entries with the operator's own entries added or replacing them."""
        if preset not in PRESETS:
            raise ValueError(f"unknown catalog preset {preset!r}; use one of {', '.join(PRESETS)}")
        merged = {
            **_OPERATOR_ENTRIES,
            **PRESETS[preset],
            **{name: expr.strip() for name, expr in (overrides or {}).items()},
        }
        return cls(MappingProxyType(dict(sorted(merged.items()))))

    def promql(self) -> dict[str, str]:
        """The entries Prometheus answers (all but the operator-read signals)."""
        return {name: expr for name, expr in self.entries.items() if operator_signal(expr) is None}

    def names(self) -> frozenset[str]:
        return frozenset(self.entries)

    def expression(self, metric: str) -> str | None:
        """The PromQL of ``metric``, or None when the catalog does not know it."""
        return self.entries.get(metric)

    def unknown(self, metric: str) -> str:
        """The message for a rule that names a metric the catalog lacks: what would fit instead."""
        return unknown_metric_message(metric, self.names())


def unknown_metric_message(metric: str, known: frozenset[str] | set[str]) -> str:
    """What a user reads when a rule names a metric the operator does not know."""
    return (
        f"unknown metric {metric!r}; the operator's catalog has {', '.join(sorted(known)) or 'no metrics'} "
        "(add one to the operator's control.catalog, or write raw PromQL in the rule's query field)"
    )
