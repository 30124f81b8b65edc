"""The allocator core on recorded torch_npu ``memory_stats()`` dicts: healthy, fragmented, empty, broken."""

import json
import math
from pathlib import Path

import pytest

from ascend_fleet_exporter.allocator import (
    AllocatorStats,
    combine,
    combined_ratios,
    fragmentation_ratio,
    holds_memory,
    parse_memory_stats,
    slack_ratio,
)

DATA = Path(__file__).parent / "data"
GIB = 1024**3


def recorded(name: str) -> dict:
    return json.loads((DATA / f"memory_stats_{name}.json").read_text())


def test_fragmented_allocator():
    stats, problems = parse_memory_stats(recorded("fragmented"))
    assert problems == ()
    assert stats.reserved_bytes == 58 * GIB
    assert stats.allocated_bytes == 40 * GIB
    assert stats.fragmentation_ratio == pytest.approx(0.25)
    assert stats.slack_ratio == pytest.approx(18 / 58)
    assert (stats.alloc_retries, stats.ooms) == (12, 1)


def test_healthy_allocator_with_expandable_segments_is_barely_fragmented():
    stats, problems = parse_memory_stats(recorded("healthy"))
    assert problems == ()
    assert stats.fragmentation_ratio == pytest.approx(64 / (58 * 1024))
    assert stats.fragmentation_ratio < 0.01
    assert stats.slack_ratio == pytest.approx(3 / 58)
    assert (stats.alloc_retries, stats.ooms) == (0, 0)


def test_empty_stats_are_unknown_not_zero():
    stats, problems = parse_memory_stats(recorded("empty"))
    assert stats == AllocatorStats()
    assert stats.fragmentation_ratio is None and stats.slack_ratio is None
    assert problems == ("memory_stats is empty: the allocator is not initialized in this process",)


def test_broken_stats_keep_what_is_valid_and_say_what_is_not():
    stats, problems = parse_memory_stats(recorded("broken"))
    assert stats.reserved_bytes is None  # a string, not a number
    assert stats.allocated_bytes is None  # negative
    assert stats.inactive_split_bytes is None  # missing
    assert stats.alloc_retries is None  # a boolean
    assert stats.ooms == 1
    assert stats.fragmentation_ratio is None and stats.slack_ratio is None
    text = "\n".join(problems)
    assert "['reserved_bytes.all.current'] is '62277025792' (str), expected a number" in text
    assert "['allocated_bytes.all.current'] is -5, expected a non-negative finite number" in text
    assert "has no 'inactive_split_bytes.all.current'" in text
    assert "['num_alloc_retries'] is True (bool)" in text


@pytest.mark.parametrize("odd", [None, [], "stats", 42])
def test_a_result_that_is_not_a_dict_is_reported(odd):
    stats, problems = parse_memory_stats(odd)
    assert stats == AllocatorStats()
    assert "expected a dict" in problems[0]


def test_non_finite_values_are_rejected():
    stats, problems = parse_memory_stats(
        {"reserved_bytes.all.current": math.nan, "allocated_bytes.all.current": math.inf}
    )
    assert stats.reserved_bytes is None and stats.allocated_bytes is None
    assert len([p for p in problems if "finite" in p]) == 2


def test_nested_form_is_read_too():
    nested = {
        "reserved_bytes": {"all": {"current": 100}},
        "allocated_bytes": {"all": {"current": 70}},
        "inactive_split_bytes": {"all": {"current": 10}},
        "num_alloc_retries": 2,
        "num_ooms": 0,
    }
    stats, problems = parse_memory_stats(nested)
    assert problems == ()
    assert (stats.fragmentation_ratio, stats.slack_ratio) == (pytest.approx(0.1), pytest.approx(0.3))


def test_nothing_reserved_means_no_fragmentation_and_no_slack():
    stats, problems = parse_memory_stats(
        {
            "reserved_bytes.all.current": 0,
            "allocated_bytes.all.current": 0,
            "inactive_split_bytes.all.current": 0,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }
    )
    assert problems == ()
    assert (stats.fragmentation_ratio, stats.slack_ratio) == (0.0, 0.0)


def test_impossible_values_are_clamped_and_reported():
    stats, problems = parse_memory_stats(
        {
            "reserved_bytes.all.current": 100,
            "allocated_bytes.all.current": 150,
            "inactive_split_bytes.all.current": 120,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }
    )
    assert (stats.fragmentation_ratio, stats.slack_ratio) == (1.0, 0.0)
    assert len(problems) == 2 and all("clamped" in p for p in problems)


@pytest.mark.parametrize(
    ("part", "whole", "fragmentation", "slack"),
    [
        (25, 100, 0.25, 0.75),
        (0, 100, 0.0, 1.0),
        (100, 100, 1.0, 0.0),
        (5, 0, 0.0, 0.0),
        (None, 100, None, None),
        (5, None, None, None),
    ],
)
def test_ratios(part, whole, fragmentation, slack):
    assert fragmentation_ratio(part, whole) == fragmentation
    assert slack_ratio(part, whole) == slack


def test_a_device_counts_as_used_once_its_allocator_held_memory():
    assert holds_memory(recorded("fragmented"))
    assert not holds_memory(recorded("empty"))
    assert not holds_memory({"reserved_bytes.all.current": 0, "reserved_bytes.all.peak": 0})
    assert holds_memory({"reserved_bytes.all.current": 0, "reserved_bytes.all.peak": 4096})  # cache emptied
    assert not holds_memory("not a dict")


def test_processes_on_one_device_add_up_and_ratios_come_from_the_sums():
    a = AllocatorStats(
        reserved_bytes=100, allocated_bytes=50, inactive_split_bytes=40, alloc_retries=1, ooms=0
    )
    b = AllocatorStats(
        reserved_bytes=300, allocated_bytes=290, inactive_split_bytes=0, alloc_retries=2, ooms=1
    )
    assert combine([a, b]) == AllocatorStats(400, 340, 40, 3, 1)
    assert combined_ratios([a, b]) == (pytest.approx(0.1), pytest.approx(0.15))


def test_a_process_without_a_term_does_not_skew_the_ratio():
    known = AllocatorStats(reserved_bytes=100, allocated_bytes=80, inactive_split_bytes=20)
    partial = AllocatorStats(reserved_bytes=900, allocated_bytes=None, inactive_split_bytes=None)
    assert combined_ratios([known, partial]) == (pytest.approx(0.2), pytest.approx(0.2))
    assert combined_ratios([partial]) == (None, None)
    assert combine([]) == AllocatorStats()


def test_of_several_processes_on_one_device_the_largest_free_block_is_the_largest():
    merged = combine(
        [
            AllocatorStats(100, 80, 10, largest_free_block_bytes=12),
            AllocatorStats(50, 40, 0, largest_free_block_bytes=30),
            AllocatorStats(10, 5, 0),
        ]
    )
    assert merged.largest_free_block_bytes == 30 and merged.reserved_bytes == 160
    assert combine([AllocatorStats(10, 5, 0)]).largest_free_block_bytes is None
