"""Policies that steer the simulated fleet: a fixed size, a Kubernetes HPA, and the project's rules.

The rules policy lives in ``rules.py`` because it adapts the operator's own evaluation code.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from .model import SERVING, STARTING, FleetView, TickDecision


@dataclass
class StaticPolicy:
    """N replicas, always."""

    replicas: int
    interval: float = 60.0
    name: str = "static"

    def decide(self, view: FleetView) -> TickDecision:
        return TickDecision(replicas=self.replicas)


@dataclass
class HpaPolicy:
    """The Kubernetes HorizontalPodAutoscaler's algorithm on the mean NPU utilization of the replicas.

    desired = ceil(current x utilization / target), skipped within ``tolerance`` of the target. As the
    HPA's replica calculator does, replicas without a metric yet (loading their model) count as 0 % on
    the way up and as exactly on target on the way down; a scale-down takes the highest recommendation
    of the last ``stabilization`` seconds; a scale-up adds at most max(4 replicas, 100 %) per period.
    """

    target: float = 0.70
    tolerance: float = 0.10
    stabilization: float = 300.0
    interval: float = 15.0
    name: str = "hpa"
    _history: deque[tuple[float, int]] = field(default_factory=deque, init=False, repr=False)

    def decide(self, view: FleetView) -> TickDecision:
        current = view.desired
        ready, missing = _utilizations(view)
        if not ready:
            return TickDecision()  # no metrics at all: the HPA does nothing
        recommended = hpa_replicas(current, ready, missing, self.target, self.tolerance)
        self._history.append((view.now, recommended))
        while self._history and self._history[0][0] < view.now - self.stabilization:
            self._history.popleft()
        if recommended < current:
            recommended = max(r for _, r in self._history)
        else:
            recommended = min(recommended, max(current + 4, 2 * current))
        bounds = view.config
        return TickDecision(replicas=min(max(recommended, bounds.min_replicas), bounds.max_replicas))


def desired_replicas(current: int, utilization: float, target: float, tolerance: float) -> int:
    """The HPA formula: ``ceil(current x utilization / target)``, or ``current`` within the tolerance."""
    ratio = utilization / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    return math.ceil(current * ratio)


def hpa_replicas(current: int, ready: list[float], missing: int, target: float, tolerance: float) -> int:
    """The HPA replica calculator for a pods metric (``calcPlainMetricReplicas``).

    ``ready`` holds the utilization of each replica that reports one; ``missing`` counts replicas that
    exist but report nothing yet.
    """
    ratio = sum(ready) / len(ready) / target
    if missing == 0:
        return (
            desired_replicas(len(ready), ratio * target, target, tolerance)
            if abs(ratio - 1) > tolerance
            else current
        )
    # Missing replicas pull the ratio towards "no change": 0 % on a scale-up, on target on a scale-down.
    filler = 0.0 if ratio > 1.0 else target
    values = [*ready, *([filler] * missing)]
    new_ratio = sum(values) / len(values) / target
    if abs(new_ratio - 1.0) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    wanted = math.ceil(new_ratio * len(values))
    if (new_ratio < 1.0 and wanted > current) or (new_ratio > 1.0 and wanted < current):
        return current
    return wanted


def _utilizations(view: FleetView) -> tuple[list[float], int]:
    """Utilization at the latest scrape of each serving replica, and how many starting ones have none.

    Draining replicas are terminating pods, which the HPA ignores.
    """
    scrape = view.metrics.latest()
    values = scrape.replicas if scrape is not None else {}
    ready = [values[r.index][0] for r in view.serving if r.index in values]
    missing = sum(
        1 for r in view.replicas if r.state == STARTING or (r.state == SERVING and r.index not in values)
    )
    return ready, missing
