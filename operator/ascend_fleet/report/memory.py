"""The memory report's pure parts: the range queries, time buckets, restarts and CSV rows (no I/O).

The report reads the exporter's per-device HBM series from Prometheus's ``/api/v1/query_range``, one
query per column, grouped per replica *and pod* so a pod replaced under the same replica shows as a
restart. Prometheus answers a range query at ``start + k * step``; the start is aligned to a multiple of
the step, so two reports of the same window share their buckets. A value Prometheus did not return
stays empty (``None``), never 0: absent is not "no memory".
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..api.actions import HEALTHY_RESTART_ACTIONS
from ..api.exporter_series import (
    ALLOC_RETRIES_TOTAL,
    HBM_USED_BYTES,
    MEMORY_FRAGMENTATION_RATIO,
    MEMORY_LARGEST_FREE_BLOCK_BYTES,
    MEMORY_RESERVED_BYTES,
)

# The CSV's value columns and the exporter series each is read from (the worst device of the pod: the most
# used, reserved or fragmented, the smallest largest free block). The largest free block comes from torch_npu's
# memory_snapshot(); where an exporter does not read it, its cells stay empty.
VALUE_SERIES: Mapping[str, str] = {
    "hbm_used_bytes": HBM_USED_BYTES,
    "hbm_reserved_bytes": MEMORY_RESERVED_BYTES,
    "fragmentation": MEMORY_FRAGMENTATION_RATIO,
    "largest_free_block_bytes": MEMORY_LARGEST_FREE_BLOCK_BYTES,
}
WORST_IS_SMALLEST = frozenset({"largest_free_block_bytes"})
# A counter that only a new process starts again from 0: its decrease is a restart even under one pod name.
RESTART_COUNTER = "restart_counter"
COLUMNS = ("time", "namespace", "inference", "replica", *VALUE_SERIES)
_GROUP = "namespace, inference, replica, pod"

ReplicaKey = tuple[str, str, int]


@dataclass(frozen=True)
class ReportWindow:
    """The report's time range: buckets ``start, start + step, ... <= end`` (seconds since the epoch)."""

    start: float
    end: float
    step: float

    @classmethod
    def ending_at(cls, end: float, since: float, step: float) -> ReportWindow:
        """The window of ``since`` seconds up to ``end``, its start aligned to a multiple of ``step``."""
        if step <= 0 or since <= 0:
            raise ValueError("--since and --step must be positive durations")
        start = math.floor((end - since) / step) * step
        return cls(start, end, step)

    def buckets(self) -> list[float]:
        """Every bucket time of the window, as Prometheus's range query answers them."""
        count = int(math.floor((self.end - self.start) / self.step + 1e-9)) + 1
        return [self.start + index * self.step for index in range(count)]


def range_queries(namespace: str, inference: str) -> dict[str, str]:
    """Column -> PromQL: per replica and pod, the worst device of that pod, for one AscendInference."""
    selector = f'{{namespace="{_quoted(namespace)}", inference="{_quoted(inference)}"}}'
    queries = {
        column: f"{'min' if column in WORST_IS_SMALLEST else 'max'} by ({_GROUP}) ({metric}{selector})"
        for column, metric in VALUE_SERIES.items()
    }
    queries[RESTART_COUNTER] = f"max by ({_GROUP}) ({ALLOC_RETRIES_TOTAL}{selector})"
    return queries


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@dataclass
class ReplicaHistory:
    """One replica's values per bucket time and column, and the pod that reported each bucket."""

    values: dict[float, dict[str, float]] = field(default_factory=dict)
    pods: dict[float, str] = field(default_factory=dict)
    counter: dict[float, float] = field(default_factory=dict)


def histories(answers: Mapping[str, Sequence[Mapping]]) -> dict[ReplicaKey, ReplicaHistory]:
    """Column -> a range query's ``result`` (matrix) into one history per replica.

    When two pods of a replica overlap in a bucket (the old one's last scrape and the new one's first),
    the pod first seen later wins that bucket: it is the replica's process from then on.
    """
    first_seen: dict[tuple[ReplicaKey, str], float] = {}
    points: list[tuple[ReplicaKey, str, str, float, float]] = []
    for column, result in answers.items():
        for series in result:
            labels = series.get("metric") or {}
            key = _replica_key(labels)
            if key is None:
                continue
            pod = str(labels.get("pod", ""))
            for stamp, text in series.get("values") or []:
                value, at = float(text), float(stamp)
                if math.isnan(value):
                    continue
                first_seen[(key, pod)] = min(at, first_seen.get((key, pod), at))
                points.append((key, pod, column, at, value))
    result_by_replica: dict[ReplicaKey, ReplicaHistory] = {}
    for key, pod, column, at, value in sorted(points, key=lambda p: (first_seen[(p[0], p[1])], p[3])):
        history = result_by_replica.setdefault(key, ReplicaHistory())
        history.pods[at] = pod
        if column == RESTART_COUNTER:
            history.counter[at] = value
        else:
            history.values.setdefault(at, {})[column] = value
    return dict(sorted(result_by_replica.items()))


def _replica_key(labels: Mapping[str, str]) -> ReplicaKey | None:
    try:
        return (str(labels["namespace"]), str(labels["inference"]), int(labels["replica"]))
    except (KeyError, ValueError):
        return None


def restarts(history: ReplicaHistory) -> list[float]:
    """Bucket times where the replica's process changed: another pod, or the restart counter went down."""
    found = []
    previous_pod: str | None = None
    previous_count: float | None = None
    for at in sorted(set(history.pods) | set(history.counter)):
        pod, count = history.pods.get(at), history.counter.get(at)
        changed_pod = pod is not None and previous_pod is not None and pod != previous_pod
        reset = count is not None and previous_count is not None and count < previous_count
        if changed_pod or reset:
            found.append(at)
        previous_pod = pod if pod is not None else previous_pod
        previous_count = count if count is not None else previous_count
    return found


def restart_actions(actions: Iterable[Mapping], start: float, end: float) -> dict[int, list[float]]:
    """Replica -> times of the operator's decisions that recycle a healthy replica (``restart_service``; the
    rows of ``api.actions`` that say ``restarts_healthy``) in ``status.actions``, in the window."""
    found: dict[int, list[float]] = {}
    for action in actions:
        target = str(action.get("target") or "")
        if action.get("action") not in HEALTHY_RESTART_ACTIONS or not target.startswith("replica-"):
            continue
        try:
            replica = int(target.removeprefix("replica-"))
            at = datetime.fromisoformat(str(action.get("time"))).timestamp()
        except ValueError:
            continue
        if start <= at <= end:
            found.setdefault(replica, []).append(at)
    return found


def csv_rows(histories_by_replica: Mapping[ReplicaKey, ReplicaHistory]) -> list[list[str]]:
    """The CSV body: one row per replica and bucket that has any value; absent values are empty cells."""
    rows = []
    for (namespace, inference, replica), history in histories_by_replica.items():
        for at in sorted(history.values):
            values = history.values[at]
            cells = [_cell(values.get(column)) for column in VALUE_SERIES]
            rows.append([_timestamp(at), namespace, inference, str(replica), *cells])
    return rows


def csv_text(rows: Sequence[Sequence[str]]) -> str:
    """The CSV document: the header of :data:`COLUMNS`, then ``rows``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(rows)
    return buffer.getvalue()


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if value.is_integer() and abs(value) >= 1 else f"{value:.6g}"


def _timestamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
