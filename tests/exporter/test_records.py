"""Per-process records: the JSON format, staleness, and the union without loss or double counting."""

import json

import pytest

from ascend_fleet_exporter.allocator import AllocatorStats
from ascend_fleet_exporter.metrics import DeviceSample
from ascend_fleet_exporter.npu_smi import NpuUsage
from ascend_fleet_exporter.records import ProcessRecord, TimedUsage, decode, encode, merge, stale_after

GIB = 1024**3


def rank(
    pid: int,
    device: str,
    *,
    reserved: float = 10 * GIB,
    inactive: float = GIB,
    allocated: float = 8 * GIB,
    retries: float = 0,
    aicore: float = 0.5,
    sampled_at: float = 100.0,
    errors=None,
) -> ProcessRecord:
    return ProcessRecord(
        pid=pid,
        written_at=100.0,
        interval=5.0,
        allocator={device: AllocatorStats(reserved, allocated, inactive, retries, 0)},
        usage={device: TimedUsage(sampled_at, NpuUsage(aicore, 30 * GIB, 64 * GIB))},
        errors=errors or {"torch_npu": 0, "npu_smi": 0},
    )


def test_one_process_per_device_gives_each_device_once():
    snapshot = merge([rank(11, "0", aicore=0.9), rank(12, "1", inactive=2 * GIB, aicore=0.1, retries=3)])
    assert snapshot.devices == {
        "0": DeviceSample(0.9, 30 * GIB, 64 * GIB, 0.1, pytest.approx(0.2), 10 * GIB, 8 * GIB, 0, 0),
        "1": DeviceSample(0.1, 30 * GIB, 64 * GIB, 0.2, pytest.approx(0.2), 10 * GIB, 8 * GIB, 3, 0),
    }
    assert snapshot.scrape_errors == {"torch_npu": 0, "npu_smi": 0}


def test_two_processes_on_one_device_add_allocators_but_not_device_usage():
    older = rank(
        11, "0", reserved=10 * GIB, inactive=4 * GIB, allocated=5 * GIB, retries=1, aicore=0.2, sampled_at=90
    )
    newer = rank(
        12, "0", reserved=30 * GIB, inactive=0, allocated=25 * GIB, retries=2, aicore=0.7, sampled_at=99
    )
    sample = merge([older, newer]).devices["0"]
    assert sample.reserved_bytes == 40 * GIB and sample.allocated_bytes == 30 * GIB
    assert sample.fragmentation_ratio == pytest.approx(0.1)
    assert sample.slack_ratio == pytest.approx(0.25)
    assert sample.alloc_retries == 3
    assert sample.utilization_ratio == 0.7  # the newest npu-smi sample, not a sum
    assert sample.hbm_used_bytes == 30 * GIB


def test_scrape_errors_add_up_per_collector():
    snapshot = merge(
        [rank(1, "0", errors={"npu_smi": 2, "torch_npu": 0}), rank(2, "1", errors={"npu_smi": 1})]
    )
    assert snapshot.scrape_errors == {"npu_smi": 3, "torch_npu": 0}


def test_a_device_with_only_usage_or_only_allocator_values():
    only_usage = ProcessRecord(1, 0.0, 5.0, usage={"2": TimedUsage(1.0, NpuUsage(aicore_ratio=0.3))})
    only_allocator = ProcessRecord(2, 0.0, 5.0, allocator={"3": AllocatorStats(100, 50, 10, 0, 0)})
    devices = merge([only_usage, only_allocator]).devices
    assert devices["2"] == DeviceSample(utilization_ratio=0.3)
    assert devices["3"] == DeviceSample(
        fragmentation_ratio=0.1,
        slack_ratio=0.5,
        reserved_bytes=100,
        allocated_bytes=50,
        alloc_retries=0,
        ooms=0,
    )


def test_nothing_to_merge():
    snapshot = merge([])
    assert (snapshot.devices, snapshot.scrape_errors) == ({}, {})


def test_json_round_trip():
    record = rank(4242, "5", retries=7)
    assert decode(encode(record)) == record
    partial = ProcessRecord(
        7,
        1.5,
        0.25,
        allocator={"0": AllocatorStats(reserved_bytes=1.0)},
        usage={"0": TimedUsage(2.0, NpuUsage())},
        errors={},
    )
    assert decode(encode(partial)) == partial


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a schema-1 record"),
        ('{"schema": 2}', "not a schema-1 record"),
        ('{"schema": 1, "pid": "7", "devices": {}, "errors": {}}', "is not a process id"),
        ('{"schema": 1, "pid": 7, "devices": [], "errors": {}}', "must be objects"),
        (
            '{"schema": 1, "pid": 7, "written_at": 1, "interval": 5, "devices": {"0": 3}, "errors": {}}',
            "is not an object",
        ),
        (
            '{"schema": 1, "pid": 7, "written_at": 1, "interval": 5, "devices": '
            '{"0": {"allocator": {"reserved_bytes": "x"}}}, "errors": {}}',
            "reserved_bytes is 'x'",
        ),
        (
            '{"schema": 1, "pid": 7, "written_at": 1, "interval": 5, "devices": '
            '{"0": {"usage": {"aicore_ratio": 0.1}}}, "errors": {}}',
            "usage has no sampled_at",
        ),
        ('{"schema": 1, "pid": 7, "interval": 5, "devices": {}, "errors": {}}', "written_at is None"),
    ],
)
def test_malformed_records_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        decode(text)


def test_the_file_format_is_plain_json():
    data = json.loads(encode(rank(9, "1")))
    assert data["pid"] == 9 and data["schema"] == 1
    assert data["devices"]["1"]["allocator"]["reserved_bytes"] == 10 * GIB
    assert data["devices"]["1"]["usage"]["sampled_at"] == 100.0


def test_a_record_goes_stale_after_three_missed_samples_or_ten_seconds():
    record = ProcessRecord(1, written_at=100.0, interval=5.0)
    assert stale_after(5.0) == 15.0 and stale_after(0.2) == 10.0
    assert not record.stale(now=114.9)
    assert record.stale(now=115.1)
