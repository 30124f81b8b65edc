"""The tuning curve as a PNG: tokens/s and TTFT against batch size, the target and the choice marked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .choice import Goal
from .table import Row


def write_png(rows: Sequence[Row], chosen: Row | None, goal: Goal, path: Path, title: str) -> Path:
    """Draw the plain rungs as lines (adaptive rungs as separate markers) and save to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, left = plt.subplots(figsize=(8, 4.5), dpi=110)
    right = left.twinx()
    for label in sorted({r.adaptive for r in rows}):
        series = sorted((r for r in rows if r.adaptive == label), key=lambda r: r.batch_size)
        xs = [r.batch_size for r in series]
        suffix = f" ({label})" if label else ""
        style = "-" if not label else ":"
        left.plot(
            xs,
            [r.tokens_per_second for r in series],
            "o" + style,
            color="tab:blue",
            label=f"tokens/s{suffix}",
        )
        right.plot(
            xs, [r.ttft_p99_ms for r in series], "s" + style, color="tab:red", label=f"TTFT p99{suffix}"
        )
        right.plot(
            xs,
            [r.ttft_p50_ms for r in series],
            "^" + style,
            color="tab:orange",
            alpha=0.7,
            label=f"TTFT p50{suffix}",
        )
    if goal.target_ttft_s is not None:
        right.axhline(
            goal.target_ttft_s * 1000,
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label=f"target {goal.target_ttft_s * 1000:g} ms",
        )
    if chosen is not None:
        left.axvline(chosen.batch_size, color="tab:green", linewidth=6, alpha=0.25)
        left.annotate(
            f"chosen: {chosen.label}",
            (chosen.batch_size, chosen.tokens_per_second),
            textcoords="offset points",
            xytext=(8, -14),
            color="tab:green",
        )
    left.set_xscale("log", base=2)
    sizes = sorted({r.batch_size for r in rows})
    left.set_xticks(sizes, [str(s) for s in sizes])
    left.set_xlabel("batch size (maxBatchSize = client concurrency)")
    left.set_ylabel("output tokens/s", color="tab:blue")
    right.set_ylabel("time to first token (ms)", color="tab:red")
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(handles, labels, loc="upper left", fontsize=8)
    left.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
