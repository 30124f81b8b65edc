"""NPU utilization over a rung, from Prometheus, through the control loop's own client and catalog.

The figure is optional: a run without ``--prometheus`` reads none, and an engine without NPUs (the dev
cluster's real vLLM on CPU, whose exporter reports no devices) has no series to read. Either way the table
shows ``-`` and :func:`utilization_note` says why, rather than a made-up 0 %.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from ..api.catalog import Catalog
from ..control.prometheus import Prometheus
from ..control.queries import Query, QueryWindow

STEP_SECONDS = 1.0


@dataclass(frozen=True)
class Utilization:
    """One rung's mean utilization (0..1), or None and why there is none."""

    value: float | None
    why_none: str = ""


def catalog_expression() -> str:
    """The catalog's ``npu_utilization``: one series per replica, labelled namespace/inference/replica."""
    expression = Catalog.build().expression("npu_utilization")
    assert expression is not None
    return expression


def mean_utilization(
    url: str, expression: str, start: float, end: float, replica: tuple[str, str, int] | None = None
) -> Utilization:
    """The mean of ``expression`` from ``start`` to ``end``: of one replica's series when ``replica``
    (namespace, name, index) is given, else of all series; None and the reason without data or when
    Prometheus fails."""
    seconds = max(STEP_SECONDS, float(round(end - start)))
    query = Query(QueryWindow(expression, seconds, "replica" if replica else "fleet"), "avg")
    observations = asyncio.run(Prometheus(url).observe([query], STEP_SECONDS, end))
    failure = observations.failure(query)
    if failure is not None:
        return Utilization(None, f"Prometheus at {url} did not answer ({failure.reason}: {failure.message})")
    series = observations.series.get(query, {})
    value = (
        series.get(replica)
        if replica is not None
        else (sum(series.values()) / len(series) if series else None)
    )
    if value is None:
        whose = "replica 0's" if replica is not None else "any"
        return Utilization(None, f"Prometheus at {url} holds no NPU utilization series of {whose} engine")
    return Utilization(value)


def utilization_note(prometheus: str | None, missing: Sequence[tuple[str, str]], rungs: int) -> str | None:
    """One line on the NPU UTIL column when some rungs have no figure (None when every rung has one).

    ``missing`` holds (rung label, why) for each rung without a figure; the first reason is told."""
    if not missing:
        return None
    if prometheus is None:
        return "NPU UTIL: not read (pass --prometheus URL to read the engines' NPU utilization)"
    labels = ", ".join(label for label, _ in missing)
    which = "no rung has a figure" if len(missing) == rungs else f"no figure at batch {labels}"
    return (
        f"NPU UTIL: {which}: {missing[0][1]} (an engine without NPUs, such as vLLM on CPU, exports "
        f"none); the column shows - instead"
    )
