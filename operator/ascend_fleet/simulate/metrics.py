"""What the simulated exporters publish, kept the way Prometheus keeps it: one sample per scrape.

Every scrape interval each replica whose engine runs (serving or draining; a replica loading its model
exports nothing yet) contributes its NPU utilization averaged over the interval and its memory
fragmentation at the scrape. Policies read windows of these samples, never the model's internals.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

UTILIZATION = "npu_utilization"
FRAGMENTATION = "mem_fragmentation"
METRICS = (UTILIZATION, FRAGMENTATION)


@dataclass(frozen=True)
class Scrape:
    """One scrape: time and, per replica index, (utilization, fragmentation)."""

    time: float
    replicas: dict[int, tuple[float, float]]


class MetricStore:
    """Scrapes in time order, kept for ``retention`` seconds."""

    def __init__(self, retention: float) -> None:
        self.retention = retention
        self._scrapes: deque[Scrape] = deque()

    def add(self, scrape: Scrape) -> None:
        """Append a scrape and forget the ones older than the retention."""
        self._scrapes.append(scrape)
        horizon = scrape.time - self.retention
        while self._scrapes and self._scrapes[0].time < horizon:
            self._scrapes.popleft()

    def window(self, start: float, end: float) -> list[Scrape]:
        """Scrapes with ``start < time <= end`` (Prometheus range selectors exclude the left edge)."""
        return [s for s in self._scrapes if start < s.time <= end]

    def latest(self) -> Scrape | None:
        return self._scrapes[-1] if self._scrapes else None

    def replica_series(self, metric: str, index: int, start: float, end: float) -> list[tuple[float, float]]:
        """``(time, value)`` of one replica's metric in the window."""
        column = _column(metric)
        return [(s.time, s.replicas[index][column]) for s in self.window(start, end) if index in s.replicas]

    def fleet_series(self, metric: str, start: float, end: float) -> list[tuple[float, float]]:
        """``(time, value)`` of the fleet aggregate, the mean over replicas (the operator's
        ``avg by (namespace, inference)``); a scrape with no replica is a missing sample."""
        column = _column(metric)
        series = []
        for s in self.window(start, end):
            if s.replicas:
                values = [v[column] for v in s.replicas.values()]
                series.append((s.time, sum(values) / len(values)))
        return series

    def replicas_in(self, start: float, end: float) -> list[int]:
        """Replica indexes that have at least one sample in the window, in index order."""
        return sorted({i for s in self.window(start, end) for i in s.replicas})


def _column(metric: str) -> int:
    try:
        return METRICS.index(metric)
    except ValueError:
        raise KeyError(f"the simulator exports {', '.join(METRICS)}, not {metric!r}") from None
