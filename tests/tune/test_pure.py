"""The pure parts of `ascend-fleet tune`: the ladder, the choice on a table, the hash, the patches."""

from __future__ import annotations

import pytest

from ascend_fleet.api.v1alpha1 import AscendInferenceStatus
from ascend_fleet.tune.choice import Goal, choose
from ascend_fleet.tune.ladder import (
    DEFAULT_LADDER,
    NO_CHUNKED_PREFILL,
    PREFILL_DELAYER_VARIANT,
    Rung,
    parse_ladder,
    round_to_multiple,
    rounded_ladder,
    rungs,
)
from ascend_fleet.tune.patch import batching_patch, restore_patch, status_patch, tuning_record
from ascend_fleet.tune.table import Row, format_table, table_hash

# The seeds' measured ladder: batch -> (tokens/s, TTFT ms); E2E is not in the seed, so a plausible figure.
SEED = {4: (180, 45), 8: (420, 52), 16: (890, 68), 32: (1550, 105), 64: (2100, 210), 128: (2150, 450)}


def seed_table(ttft_scale: float = 1.0) -> list[Row]:
    return [Row(b, "", tps, ttft * 0.8, ttft * ttft_scale, ttft * 12, completed=4 * b) for b, (tps, ttft) in
            SEED.items()]  # fmt: skip


def test_the_seed_table_gives_the_seeds_choice_for_its_100ms_target():
    choice = choose(seed_table(), Goal())
    assert choice.met and choice.row.batch_size == 32
    assert "1550 tokens/s" in choice.reason and "batch 64 needs 210 ms" in choice.reason


def test_the_tolerance_decides_whether_105ms_meets_a_100ms_target():
    assert choose(seed_table(), Goal(0.100, tolerance=0.0)).row.batch_size == 16
    assert choose(seed_table(), Goal(0.100, tolerance=0.05)).row.batch_size == 32
    assert choose(seed_table(), Goal(0.250)).row.batch_size == 64


def test_max_throughput_takes_the_knee_not_two_percent_more_at_twice_the_latency():
    choice = choose(seed_table(), Goal(None))
    assert choice.row.batch_size == 64
    assert "batch 128 gives only 2% more" in choice.reason
    assert choose(seed_table(), Goal(None, min_gain=0.0)).row.batch_size == 128


def test_no_rung_within_the_target_picks_the_fastest_and_says_so():
    choice = choose(seed_table(), Goal(0.030))
    assert not choice.met and choice.row.batch_size == 4
    assert "no rung meets TTFT p99 <= 36 ms" in choice.reason


def test_rungs_with_failed_requests_do_not_qualify():
    rows = seed_table()
    rows[3] = Row(32, "", 1550, 80, 105, 1200, completed=100, failed=28)
    assert choose(rows, Goal()).row.batch_size == 16
    assert choose([Row(8, "", 0, 0, 0, 0, completed=0, failed=10)], Goal()).row is None


def test_an_adaptive_rung_that_is_faster_within_the_target_wins():
    rows = seed_table() + [Row(32, PREFILL_DELAYER_VARIANT.label, 1700, 80, 104, 1200, completed=128)]
    choice = choose(rows, Goal())
    assert (choice.row.batch_size, choice.row.adaptive) == (32, "prefillDelayer")


def test_ladder_parsing_and_ascend_rounding():
    assert parse_ladder("32, 4,8,8") == (4, 8, 32)
    with pytest.raises(ValueError, match="'x' is not a positive batch size"):
        parse_ladder("4,x")
    assert [round_to_multiple(n, 16) for n in (4, 8, 16, 24, 40, 100, 128)] == [16, 16, 16, 32, 48, 96, 128]
    sizes, notes = rounded_ladder(DEFAULT_LADDER, "ascend910b")
    assert sizes == (16, 32, 64, 128)
    assert notes == ["batch 4 -> 16 (ascend910b batches in multiples of 16)",
                     "batch 8 -> 16 (ascend910b batches in multiples of 16)"]  # fmt: skip
    assert rounded_ladder(DEFAULT_LADDER, None) == (DEFAULT_LADDER, [])


def test_adaptive_rungs_only_where_the_engine_has_the_knob():
    assert [r.label for r in rungs((16, 32), "sglang", True)] == [
        "16", "32", "16 +prefillDelayer", "32 +prefillDelayer", "16 +chunkedPrefill=false",
        "32 +chunkedPrefill=false"]  # fmt: skip
    assert [r.label for r in rungs((16,), "vllm-ascend", True)] == ["16", "16 +chunkedPrefill=false"]
    assert [r.label for r in rungs((16,), "vllm-ascend", False)] == ["16"]


def test_patches_set_the_rung_and_clear_other_knobs():
    assert batching_patch(Rung(32)) == {
        "spec": {"batching": {"maxBatchSize": 32, "prefillDelayer": None, "chunkedPrefill": None}}}  # fmt: skip
    assert batching_patch(Rung(16, PREFILL_DELAYER_VARIANT))["spec"]["batching"]["prefillDelayer"] == {
        "enabled": True
    }
    assert batching_patch(Rung(16, NO_CHUNKED_PREFILL))["spec"]["batching"]["chunkedPrefill"] is False
    assert restore_patch({"maxBatchSize": 8, "maxBatchTokens": 4096}) == {
        "spec": {"batching": {"maxBatchSize": 8, "prefillDelayer": None, "chunkedPrefill": None}}}  # fmt: skip


def test_the_hash_covers_the_figures_and_the_record_round_trips_through_the_status_model():
    rows = seed_table()
    changed = [*rows[:-1], Row(128, "", 2150, 360, 451, 5400, completed=512)]
    assert table_hash(rows) == table_hash(seed_table()) != table_hash(changed)
    assert table_hash(rows).startswith("sha256:") and len(table_hash(rows)) == 71
    choice = choose(rows, Goal())
    record = tuning_record(rows, choice, Goal(), "client", "2026-12-01T09:00:00Z")
    wire = status_patch(record)["status"]
    parsed = AscendInferenceStatus.model_validate(wire)
    assert parsed.tuning.batch_size == 32 and parsed.tuning.table_hash == table_hash(rows)
    assert wire["tuning"]["goal"] == "ttft_p99 <= 100ms (+20%)"
    assert [r["batchSize"] for r in wire["tuning"]["rungs"]] == list(SEED)


def test_the_table_marks_the_choice():
    rows = seed_table()
    text = format_table(rows, rows[3])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["BATCH", "TOKENS/S", "TTFT"]
    assert lines[4].startswith("32") and lines[4].endswith("<- chosen")
    assert sum("<- chosen" in line for line in lines) == 1


def test_the_npu_column_says_why_it_has_no_figure():
    from ascend_fleet.tune.npu import utilization_note

    assert utilization_note("http://p", [], 2) is None
    assert "pass --prometheus URL" in utilization_note(None, [("16", "no Prometheus given")], 1)
    why = "Prometheus at http://p holds no NPU utilization series of replica 0's engine"
    every = utilization_note("http://p", [("16", why), ("32", why)], 2)
    assert every.startswith("NPU UTIL: no rung has a figure: " + why) and "shows - instead" in every
    assert "no figure at batch 32:" in utilization_note("http://p", [("32", why)], 2)


def test_a_tokenizer_directory_without_a_tokenizer_is_refused_with_what_would_fit(tmp_path):
    from ascend_fleet.tune.tokenizer import check_tokenizer

    with pytest.raises(ValueError, match="is not a directory; pass the directory of the model"):
        check_tokenizer(tmp_path / "missing")
    with pytest.raises(ValueError, match="holds neither tokenizer.json nor tokenizer_config.json"):
        check_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    assert check_tokenizer(tmp_path) == tmp_path
