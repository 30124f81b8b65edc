"""NPU utilization over a rung, from Prometheus, through the control loop's own client and catalog."""

from __future__ import annotations

import asyncio

from ..api.catalog import Catalog
from ..control.prometheus import Prometheus
from ..control.queries import Query, QueryWindow

STEP_SECONDS = 1.0


def catalog_expression() -> str:
    """The catalog's ``npu_utilization``: one series per replica, labelled namespace/inference/replica."""
    expression = Catalog.build().expression("npu_utilization")
    assert expression is not None
    return expression


def mean_utilization(
    url: str, expression: str, start: float, end: float, replica: tuple[str, str, int] | None = None
) -> float | None:
    """The mean of ``expression`` from ``start`` to ``end``: of one replica's series when ``replica``
    (namespace, name, index) is given, else of all series; None without data or when Prometheus fails."""
    seconds = max(STEP_SECONDS, float(round(end - start)))
    query = Query(QueryWindow(expression, seconds, "replica" if replica else "fleet"), "avg")
    observations = asyncio.run(Prometheus(url).observe([query], STEP_SECONDS, end))
    series = observations.series.get(query, {})
    if replica is not None:
        return series.get(replica)
    return sum(series.values()) / len(series) if series else None
