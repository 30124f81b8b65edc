"""The runs over time as a PNG: replicas, utilization, fragmentation and latency, one line per policy.

matplotlib is optional (the ``plot`` extra); without it :func:`write_runs_png` raises :class:`PlotUnavailable`
with a message that says how to get it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .model import Result
from .report import SLOW_FIRST_TOKEN_SECONDS, latency_series

MATPLOTLIB_HINT = "the PNG needs matplotlib: pip install matplotlib (or the project's 'plot' extra)"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def write_runs_png(results: Sequence[Result], path: str | Path, title: str = "") -> Path:
    """Draw every run on four shared-time panels and save them to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never needs a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(MATPLOTLIB_HINT) from None

    figure, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    replicas, utilization, fragmentation, latency = axes
    for result in results:
        hours = [p.time / 3600.0 for p in result.timeline]
        replicas.step(hours, [p.replicas for p in result.timeline], where="post", label=result.policy)
        utilization.plot(hours, [p.utilization for p in result.timeline], linewidth=0.6, label=result.policy)
        fragmentation.plot(hours, [p.fragmentation for p in result.timeline], label=result.policy)
        buckets, p99, _ = latency_series(result)
        latency.plot(buckets, p99, drawstyle="steps-post", label=result.policy)
    replicas.set_ylabel("replicas")
    utilization.set_ylabel("NPU utilization\n(serving mean)")
    utilization.set_ylim(0, 1.05)
    fragmentation.set_ylabel("fragmentation\n(worst replica)")
    latency.set_ylabel("TTFT p99 (s),\n5 min buckets")
    latency.set_yscale("log")
    latency.axhline(SLOW_FIRST_TOKEN_SECONDS, color="grey", linestyle=":", linewidth=0.8)
    latency.set_xlabel("hours")
    replicas.legend(loc="upper left", ncol=len(results), fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
