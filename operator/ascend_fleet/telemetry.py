"""The operator's own Prometheus metrics (served by ``ascend-fleet run --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "ascend_fleet_operator_reconciles_total",
    "Reconcile passes, by result (converged, changed, invalid, error).",
    ["result"],
)
RECONCILE_ERRORS = Counter(
    "ascend_fleet_operator_reconcile_errors_total", "Reconcile passes that raised an error."
)
DECISIONS = Counter(
    "ascend_fleet_operator_decisions_total",
    "Control-loop decisions, by action and dry run.",
    ["action", "dry_run"],
)
RULE_EVALUATION = Histogram(
    "ascend_fleet_operator_rule_evaluation_seconds", "Time of one control-loop cycle (queries and decisions)."
)
PROMETHEUS_FAILURES = Counter(
    "ascend_fleet_operator_prometheus_query_failures_total", "Prometheus queries that failed or timed out."
)
REPLICAS = Gauge(
    "ascend_fleet_operator_replicas",
    "Replicas per inference, by state (desired, ready, draining).",
    ["namespace", "inference", "state"],
)
UNHEALTHY_NPUS = Gauge(
    "ascend_fleet_npu_unhealthy",
    "1 for each NPU the Ascend device plugin reports unhealthy under a replica, by node, NPU and fault level "
    "(written by the operator acting as leader, each cycle a rule reads npu_unhealthy); pd_role names the role "
    "of a two-role fleet's replica, whose number counts within the role.",
    ["namespace", "inference", "pd_role", "replica", "node", "npu", "level"],
)
