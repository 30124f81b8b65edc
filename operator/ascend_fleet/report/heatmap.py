"""The memory report's heatmap PNG: replicas as rows, time buckets as columns, fragmentation as colour.

matplotlib comes with the ``plot`` extra and is imported only when a PNG is asked for, so the runtime
install does not need it. Restarts seen in the series are marked with a white cross, the operator's
``restart_service`` decisions with a black triangle, in the bucket they fall in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .memory import ReplicaHistory, ReplicaKey, ReportWindow

_MAX_TICKS = 8
_ROW_INCHES, _MIN_INCHES, _WIDTH_INCHES = 0.5, 2.5, 12.0


def fragmentation_matrix(
    histories: Mapping[ReplicaKey, ReplicaHistory], buckets: Sequence[float]
) -> list[list[float]]:
    """One row per replica, one cell per bucket: its fragmentation, NaN where the series is absent."""
    return [
        [history.values.get(at, {}).get("fragmentation", float("nan")) for at in buckets]
        for history in histories.values()
    ]


def bucket_index(buckets: Sequence[float], at: float) -> int:
    """The bucket a time falls in: the last bucket that starts at or before it."""
    index = 0
    for position, start in enumerate(buckets):
        if start <= at:
            index = position
    return index


def draw_heatmap(
    path: Path,
    histories: Mapping[ReplicaKey, ReplicaHistory],
    window: ReportWindow,
    restarts: Mapping[ReplicaKey, Sequence[float]],
    actions: Mapping[ReplicaKey, Sequence[float]],
) -> None:
    """Write the heatmap PNG of ``histories`` over ``window`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = window.buckets()
    rows = list(histories)
    height = max(_MIN_INCHES, 1.2 + _ROW_INCHES * len(rows))
    figure, axes = plt.subplots(figsize=(_WIDTH_INCHES, height))
    image = axes.imshow(
        fragmentation_matrix(histories, buckets),
        aspect="auto",
        cmap="magma",
        vmin=0.0,
        interpolation="nearest",
    )
    figure.colorbar(image, ax=axes, label="fragmentation (inactive split / reserved)")
    for row, key in enumerate(rows):
        seen = [bucket_index(buckets, at) for at in restarts.get(key, ())]
        decided = [bucket_index(buckets, at) for at in actions.get(key, ())]
        axes.scatter(seen, [row] * len(seen), marker="x", color="white", s=60, label="_restart")
        axes.scatter(decided, [row] * len(decided), marker="v", color="black", s=50, label="_action")
    axes.set_yticks(range(len(rows)), [f"{ns}/{name} replica-{replica}" for ns, name, replica in rows])
    every = max(1, len(buckets) // _MAX_TICKS)
    ticks = list(range(0, len(buckets), every))
    axes.set_xticks(ticks, [_clock(buckets[index]) for index in ticks])
    axes.set_xlabel(f"time (UTC), one column per {window.step:g} s; x: restart, v: restart_service")
    axes.set_title("HBM fragmentation per replica")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S")
