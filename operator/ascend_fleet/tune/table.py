"""The measured table: one row per rung, as text, as JSON and as a hash (pure)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Row:
    """What one rung measured."""

    batch_size: int
    adaptive: str
    tokens_per_second: float  # output (decode) tokens per second, as the seeds' table counts them
    ttft_p50_ms: float
    ttft_p99_ms: float
    e2e_p99_ms: float
    completed: int
    failed: int = 0
    npu_utilization: float | None = None  # 0..1, mean over the rung, when Prometheus was asked

    @property
    def label(self) -> str:
        return f"{self.batch_size}" + (f" +{self.adaptive}" if self.adaptive else "")

    @property
    def failure_share(self) -> float:
        total = self.completed + self.failed
        return self.failed / total if total else 1.0


def canonical(rows: Sequence[Row]) -> str:
    """The rows as canonical JSON (sorted keys, rounded figures): what the hash covers."""

    def clean(row: Row) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(row).items()}

    return json.dumps([clean(r) for r in rows], sort_keys=True, separators=(",", ":"))


def table_hash(rows: Sequence[Row]) -> str:
    """``sha256:<hex>`` of the canonical table, recorded in ``status.tuning.tableHash``."""
    return "sha256:" + hashlib.sha256(canonical(rows).encode()).hexdigest()


def format_table(rows: Sequence[Row], chosen: Row | None = None) -> str:
    """The table a user reads; the chosen row is marked with ``<-``."""
    header = ("BATCH", "TOKENS/S", "TTFT P50", "TTFT P99", "E2E P99", "NPU UTIL", "REQUESTS")
    lines = [header]
    for row in rows:
        npu = "-" if row.npu_utilization is None else f"{row.npu_utilization:.0%}"
        requests = f"{row.completed}" + (f" ({row.failed} failed)" if row.failed else "")
        lines.append(
            (
                row.label,
                f"{row.tokens_per_second:.0f}",
                f"{row.ttft_p50_ms:.0f} ms",
                f"{row.ttft_p99_ms:.0f} ms",
                f"{row.e2e_p99_ms:.0f} ms",
                npu,
                requests,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        text = "  ".join(
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        if index and chosen is not None and rows[index - 1] is chosen:
            text += "  <- chosen"
        out.append(text.rstrip())
    return "\n".join(out)
