"""The writes a tuning run makes, built as plain data (pure): the spec patch and the status record."""

from __future__ import annotations

from collections.abc import Sequence

from ..api.v1alpha1 import TuningRecord, TuningRung
from .choice import Choice, Goal
from .ladder import VARIANT_FIELDS, Rung
from .table import Row, table_hash


def batching_patch(rung: Rung) -> dict:
    """A JSON merge patch setting ``spec.batching`` for ``rung``; knobs of other variants are removed."""
    batching: dict = {"maxBatchSize": rung.batch_size}
    batching.update({name: None for name in VARIANT_FIELDS})
    batching.update(rung.variant.fields())
    return {"spec": {"batching": batching}}


def restore_patch(original: dict) -> dict:
    """A merge patch that puts ``spec.batching`` back as it was before the run (fields added are removed)."""
    fields = ("maxBatchSize", *VARIANT_FIELDS)
    return {"spec": {"batching": {name: original.get(name) for name in fields}}}


def tuning_record(rows: Sequence[Row], choice: Choice, goal: Goal, client: str, time: str) -> TuningRecord:
    """``status.tuning`` for a run whose choice is ``choice`` (which must have a row)."""
    assert choice.row is not None, "a record needs a chosen row"
    return TuningRecord(
        time=time,
        batch_size=choice.row.batch_size,
        adaptive=choice.row.adaptive,
        goal=goal.describe(),
        reason=choice.reason,
        table_hash=table_hash(rows),
        client=client,
        rungs=[
            TuningRung(
                batch_size=r.batch_size,
                adaptive=r.adaptive,
                tokens_per_second=round(r.tokens_per_second, 1),
                ttft_p50_ms=round(r.ttft_p50_ms, 1),
                ttft_p99_ms=round(r.ttft_p99_ms, 1),
                e2e_latency_p99_ms=round(r.e2e_p99_ms, 1),
                npu_utilization=None if r.npu_utilization is None else round(r.npu_utilization, 3),
            )
            for r in rows
        ],
    )


def status_patch(record: TuningRecord) -> dict:
    """The merge patch for the status subresource."""
    return {"status": {"tuning": record.wire()}}
