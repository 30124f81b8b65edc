"""One tuning run: for each rung, set it (fleet) and measure it (client, Prometheus); then choose and write."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from .choice import Choice, Goal, choose
from .client import CLIENT_NAME, Load, bench_argv, run_bench
from .fleet import Fleet
from .ladder import Rung
from .npu import Utilization, catalog_expression, mean_utilization, utilization_note
from .patch import batching_patch, restore_patch, tuning_record
from .table import Row, table_hash
from .tokenizer import write_word_tokenizer


@dataclass
class Progress:
    """What the run reports as it goes; the CLI draws it as bars, tests may record it."""

    rung_started: Callable[[Rung, int, int], None] = lambda rung, index, total: None
    phase: Callable[[str], None] = lambda text: None
    requests: Callable[[int, int], None] = lambda done, total: None
    rung_done: Callable[[Row], None] = lambda row: None


@dataclass
class Plan:
    """Everything a run needs to know."""

    rungs: list[Rung]
    goal: Goal
    load: Load
    model: str
    engine: str
    endpoint: str | None = None  # measure here; with a fleet and no endpoint, replica 0's leader
    fleet: Fleet | None = None
    port: int | None = None
    tokenizer: Path | None = None
    prometheus: str | None = None
    npu_query: str | None = None
    dry_run: bool = False
    rollout_timeout: float = 600.0
    repeats: int = 1  # runs per rung; the one with the lowest TTFT p99 counts
    settle_seconds: float = 3.0  # pause after a rung's rollout before measuring
    workdir: Path | None = None
    notes: list[str] = field(default_factory=list)  # what rounding the ladder changed, for the report


@dataclass
class Outcome:
    rows: list[Row]
    choice: Choice
    table_hash: str
    patch: dict | None  # the spec patch for the choice
    written: bool  # whether the patch and status.tuning were written
    notes: list[str] = field(default_factory=list)  # lines beside the table: why a column has no figure


def run(plan: Plan, progress: Progress | None = None) -> Outcome:
    """Measure every rung, choose, and write the choice into the fleet.

    The fleet's batching is put back as it was when the run fails, with ``dry_run``, or when no rung
    met the goal (the closest one is still reported, with its patch)."""
    progress = progress or Progress()
    work = plan.workdir or Path(tempfile.mkdtemp(prefix="ascend-fleet-tune-"))
    work.mkdir(parents=True, exist_ok=True)  # with the model's tokenizer, nothing else would create it
    tokenizer = plan.tokenizer or write_word_tokenizer(work / "tokenizer")
    original = plan.fleet.read().spec.batching.wire() if plan.fleet else {}
    rows: list[Row] = []
    missing: list[tuple[str, str]] = []  # rungs without an NPU figure, and why
    keep = False  # whether the fleet keeps what the run writes; anything else puts the batching back
    try:
        for index, rung in enumerate(plan.rungs):
            progress.rung_started(rung, index, len(plan.rungs))
            endpoint = _prepare(plan, rung, progress)
            row, why = _measure(plan, rung, endpoint, tokenizer, work / f"rung-{index}", progress)
            rows.append(row)
            if row.npu_utilization is None:
                missing.append((row.label, why))
            progress.rung_done(row)
        choice = choose(rows, plan.goal)
        patch = batching_patch(_rung_of(choice.row, plan.rungs)) if choice.row else None
        keep = bool(plan.fleet and patch and choice.met and not plan.dry_run)
        if keep:
            assert plan.fleet is not None and patch is not None
            progress.phase("writing the choice")
            generation = plan.fleet.patch_spec(patch)
            # Recorded once the operator has rolled the choice out, so status.tuning describes what runs.
            plan.fleet.wait_rollout(
                generation, plan.rollout_timeout, lambda text: progress.phase(f"rollout: {text}")
            )
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            plan.fleet.record(tuning_record(rows, choice, plan.goal, CLIENT_NAME, now))
    finally:
        if plan.fleet and not keep:
            plan.fleet.patch_spec(restore_patch(original))
    (work / "table.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    note = utilization_note(plan.prometheus, missing, len(rows))
    return Outcome(rows, choice, table_hash(rows), patch, keep, [note] if note else [])


def _measure(
    plan: Plan, rung: Rung, endpoint: str, tokenizer: Path, stem: Path, progress: Progress
) -> tuple[Row, str]:
    """Run the client ``plan.repeats`` times and keep the run with the lowest TTFT p99; the row, and why
    it has no NPU figure when it has none.

    A p99 is set by the slowest 1 % of requests; on a shared machine a scheduling stall of either
    process lands there. The least disturbed of several runs is the engine's own figure (as timeit
    reports the minimum of its repeats)."""
    best: Row | None = None
    why = ""
    for attempt in range(plan.repeats):
        progress.phase("measuring" + (f" ({attempt + 1}/{plan.repeats})" if plan.repeats > 1 else ""))
        start = time.time()
        output, log = stem.with_suffix(f".{attempt}.jsonl"), stem.with_suffix(f".{attempt}.log")
        argv = bench_argv(endpoint, plan.model, plan.engine, rung, plan.load, tokenizer, output)
        row = run_bench(argv, output, rung, plan.load.prompts(rung.batch_size), log, progress.requests)
        reading = _npu(plan, start, time.time())
        if best is None or row.ttft_p99_ms < best.ttft_p99_ms:
            best, why = replace(row, npu_utilization=reading.value), reading.why_none
    assert best is not None
    return best, why


def _prepare(plan: Plan, rung: Rung, progress: Progress) -> str:
    """Set the rung on the fleet and wait for it; the URL to measure."""
    if plan.fleet is None:
        assert plan.endpoint is not None
        return plan.endpoint
    progress.phase(f"rolling out maxBatchSize {rung.batch_size}")
    generation = plan.fleet.patch_spec(batching_patch(rung))
    plan.fleet.wait_rollout(generation, plan.rollout_timeout, lambda text: progress.phase(f"rollout: {text}"))
    if plan.endpoint:
        return plan.endpoint
    assert plan.port is not None
    url = plan.fleet.leader_endpoint(plan.port, plan.rollout_timeout)
    # The rollout's tail (the old replica's drain and deletion, the operator's status writes) still runs
    # on the cluster for a moment after the new leader is ready; measuring through it skews the p99.
    progress.phase(f"settling {plan.settle_seconds:g}s")
    time.sleep(plan.settle_seconds)
    return url


def _npu(plan: Plan, start: float, end: float) -> Utilization:
    """The NPU utilization over one measurement, when the plan can read one."""
    if not plan.prometheus:
        return Utilization(None, "no Prometheus given")
    if plan.npu_query:
        return mean_utilization(plan.prometheus, plan.npu_query, start, end)
    if plan.fleet is not None:
        replica = (plan.fleet.namespace, plan.fleet.name, 0)
        return mean_utilization(plan.prometheus, catalog_expression(), start, end, replica)
    return Utilization(None, "an endpoint alone names no replica: pass --npu-query PROMQL")


def _rung_of(row: Row, rungs: list[Rung]) -> Rung:
    return next(r for r in rungs if r.batch_size == row.batch_size and r.variant.label == row.adaptive)
