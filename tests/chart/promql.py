"""Which metric names the project exports, and which ones a PromQL expression reads (for dashboard and alerts)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.metrics import MetricWrapperBase

from ascend_fleet import telemetry

# The engine exporter's names as fixed by the team; ascend_fleet_exporter.metrics is the one place that knows
# them, and is read instead when it is importable.
_EXPORTER_CONTRACT = (
    "ascend_fleet_npu_utilization_ratio",
    "ascend_fleet_npu_aicube_utilization_ratio",
    "ascend_fleet_npu_aivector_utilization_ratio",
    "ascend_fleet_npu_aicpu_utilization_ratio",
    "ascend_fleet_hbm_bandwidth_utilization_ratio",
    "ascend_fleet_hbm_used_bytes",
    "ascend_fleet_hbm_total_bytes",
    "ascend_fleet_memory_fragmentation_ratio",
    "ascend_fleet_memory_slack_ratio",
    "ascend_fleet_memory_reserved_bytes",
    "ascend_fleet_memory_allocated_bytes",
    "ascend_fleet_alloc_retries_total",
    "ascend_fleet_ooms_total",
)
# What the engines themselves serve on their `http` port (docs/engines.md); histograms by family name.
ENGINE_GAUGES_AND_COUNTERS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:gen_throughput",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
)
ENGINE_HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "sglang:time_to_first_token_seconds",
    "sglang:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "sglang:queue_time_seconds",
)
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def exporter_metric_names() -> set[str]:
    """Series names of the engine exporter (ascend_fleet_exporter.metrics when present)."""
    try:
        from ascend_fleet_exporter import metrics
    except ImportError:
        return set(_EXPORTER_CONTRACT)
    return {spec.name for spec in metrics.DEVICE_METRICS} | {metrics.EXPORTER_SCRAPE_ERRORS_TOTAL}


def operator_metric_names() -> set[str]:
    """Series names of the operator's own metrics, from the prometheus_client objects in ascend_fleet.telemetry."""
    names: set[str] = set()
    for obj in vars(telemetry).values():
        if not isinstance(obj, MetricWrapperBase):
            continue
        for family in obj.describe():
            if family.type == "counter":
                names.add(f"{family.name}_total")
            elif family.type == "histogram":
                names |= {family.name + suffix for suffix in _HISTOGRAM_SERIES}
            else:
                names.add(family.name)
    return names


def exported_metric_names() -> set[str]:
    """Every series name a dashboard or alert of this project may read."""
    engine = set(ENGINE_GAUGES_AND_COUNTERS) | {h + s for h in ENGINE_HISTOGRAMS for s in _HISTOGRAM_SERIES}
    return exporter_metric_names() | operator_metric_names() | engine


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_TOKENS = re.compile(
    r"(?P<number>\d+(?:ms|s|m|h|d|w|y)\b|\d*\.?\d+(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<call>\s*\()?"
)
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "Inf",
    "NaN",
}
_GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "3h"}
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<expr>.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$", re.S)


def grafana_to_promql(expr: str) -> str:
    """A Grafana query as plain PromQL: built-in interval variables and template variables replaced."""
    for variable, value in _GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    expr = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)
    match = _LABEL_VALUES.match(expr)
    return match["expr"] if match else expr


def metric_names(expr: str) -> set[str]:
    """Metric names a (valid) PromQL expression selects: identifiers that are not functions, keywords or labels."""
    text = _STRINGS.sub('""', expr)
    bare_matchers = re.findall(r"\{([^{}]*)\}", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _LABEL_LISTS.sub(" ", text)
    names = {
        m["name"]
        for m in _TOKENS.finditer(text)
        if m["name"] and not m["call"] and m["name"] not in _KEYWORDS
    }
    for matchers in bare_matchers:  # {__name__="x"} selects by name too
        names |= set(re.findall(r'__name__\s*=\s*"([^"]+)"', matchers))
    return names


def promtool() -> str | None:
    return shutil.which("promtool")


def check_expressions(exprs: Iterable[str]) -> str:
    """Run ``promtool check rules`` on the expressions as recording rules; return promtool's complaint or ''."""
    rules = [{"record": f"check:expression_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "expressions.yaml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}))
        done = subprocess.run(
            [promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False
        )
    return "" if done.returncode == 0 else done.stdout + done.stderr


def pod_port(namespace: str, pod: str, port: str, labels: dict[str, str], address: str) -> dict[str, Any]:
    """A static target carrying the meta labels Kubernetes pod discovery gives one container port."""
    meta = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_container_port_name": port,
    }
    for key, value in labels.items():
        meta["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    return {"targets": [address], "labels": meta}


ENGINE_LABELS = {
    "app.kubernetes.io/name": "ascend-fleet-engine",
    "inference.ascendfleet.io/name": "qwen",
    "inference.ascendfleet.io/replica": "1",
    "inference.ascendfleet.io/rank": "0",
}


def discovered_targets(
    job: dict[str, Any], targets: list[dict[str, Any]], tmp_path: Path
) -> list[dict[str, str]]:
    """What Prometheus scrapes: ``promtool check service-discovery`` applies the job's relabelling to targets.

    Debian's Prometheus is built without Kubernetes discovery, so static targets stand in for the pod ports
    it would find; the relabelling under test is the same. Static targets are there at once, so a short
    discovery timeout loses nothing.
    """
    config = {
        "scrape_configs": [
            {**{k: v for k, v in job.items() if k != "kubernetes_sd_configs"}, "static_configs": targets}
        ]
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [promtool(), "check", "service-discovery", "--timeout=1s", str(path), job["job_name"]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [t["labels"] for t in json.loads(done.stdout) if t["labels"]]
