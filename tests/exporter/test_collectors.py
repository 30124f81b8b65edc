"""The collectors: torch_npu's allocator (through stand-ins) and the npu-smi binary (a recorded stand-in)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from ascend_fleet_exporter.allocator import AllocatorStats
from ascend_fleet_exporter.collectors import CollectorUnavailable, NpuSmi, TorchNpuStats, read_allocator
from ascend_fleet_exporter.npu_smi import MIB

from .support import install_fake_npu_smi

GOOD = {
    "reserved_bytes.all.current": 100,
    "allocated_bytes.all.current": 80,
    "inactive_split_bytes.all.current": 10,
    "num_alloc_retries": 1,
    "num_ooms": 0,
}


class Provider:
    def __init__(self, stats_by_device: dict, count: int = 4) -> None:
        self.stats_by_device, self.count = stats_by_device, count

    def device_count(self) -> int:
        return self.count

    def memory_stats(self, device: int):
        value = self.stats_by_device.get(device, {})
        if isinstance(value, Exception):
            raise value
        return value


def test_only_devices_whose_allocator_held_memory_are_read():
    owned: set[int] = set()
    reading = read_allocator(Provider({2: GOOD}), owned)
    assert reading.values == {2: AllocatorStats(100, 80, 10, 1, 0)}
    assert (reading.problems, reading.failed, owned) == ([], 0, {2})


def test_a_used_device_keeps_reporting_after_its_cache_was_emptied():
    owned = {2}
    emptied = {
        **GOOD,
        "reserved_bytes.all.current": 0,
        "allocated_bytes.all.current": 0,
        "inactive_split_bytes.all.current": 0,
    }
    reading = read_allocator(Provider({2: emptied}), owned)
    assert reading.values[2].fragmentation_ratio == 0.0


def test_failures_are_counted_not_raised():
    owned = {1, 2}
    reading = read_allocator(
        Provider({1: RuntimeError("NPU out of order"), 2: {"num_ooms": 0}, 3: ValueError()}), owned
    )
    assert set(reading.values) == {2}
    assert reading.failed == 2  # device 1 raised, device 2 is incomplete; device 3 is not ours
    assert "device 1: torch_npu memory_stats failed: RuntimeError('NPU out of order')" in reading.problems


def test_device_count_failure_is_one_failed_sample():
    class Broken(Provider):
        def device_count(self) -> int:
            raise RuntimeError("driver gone")

    reading = read_allocator(Broken({}), set())
    assert reading.failed == 1 and "device_count failed" in reading.problems[0]


def test_missing_torch_npu_is_a_clear_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # makes `import torch_npu` fail
    with pytest.raises(CollectorUnavailable, match="torch_npu cannot be imported in this Python environment"):
        TorchNpuStats().device_count()


def test_torch_npu_statistics_are_read_only_once_the_runtime_is_initialized():
    state = {"initialized": False}

    def memory_stats(device):
        assert state["initialized"], "would create a device context"
        return GOOD if device == 1 else {}

    fake = SimpleNamespace(
        npu=SimpleNamespace(
            is_initialized=lambda: state["initialized"], device_count=lambda: 2, memory_stats=memory_stats
        )
    )
    stats = TorchNpuStats(fake)
    assert stats.device_count() == 2
    assert stats.memory_stats(1) == {}
    state["initialized"] = True
    assert stats.memory_stats(1) == GOOD


@pytest.fixture
def npu_smi_dir(tmp_path, monkeypatch):
    install_fake_npu_smi(tmp_path, {0: 10, 1: 20, 2: 30, 3: 40, 4: 50, 5: 60, 6: 70, 7: 80})
    monkeypatch.setenv("FAKE_NPU_SMI_DATA", str(tmp_path / "npu-smi-data"))
    return tmp_path


def test_npu_smi_reads_the_cards_behind_the_devices(npu_smi_dir):
    reading = NpuSmi(str(npu_smi_dir / "bin" / "npu-smi")).read([1, 6])
    assert (reading.problems, reading.failed) == ([], 0)
    assert {d: u.aicore_ratio for d, u in reading.values.items()} == {1: 0.2, 6: 0.7}
    assert reading.values[1].hbm_used_bytes == 65536 * MIB * 0.87
    assert (reading.values[1].aivector_ratio, reading.values[1].hbm_bandwidth_ratio) == (0.41, 0.35)


def test_npu_smi_reads_every_device_when_none_are_named(npu_smi_dir):
    reading = NpuSmi(str(npu_smi_dir / "bin" / "npu-smi")).read()
    assert sorted(reading.values) == list(range(8))


def test_npu_smi_failures_are_counted_per_device(npu_smi_dir):
    (npu_smi_dir / "npu-smi-data" / "usages-3.txt").unlink()
    reading = NpuSmi(str(npu_smi_dir / "bin" / "npu-smi")).read([2, 3, 9])
    assert set(reading.values) == {2}
    assert reading.failed == 2
    assert "device 9: npu-smi lists no chip for it" in reading.problems
    assert any("usages -i 3 exited with 8: Error: The device does not exist." in p for p in reading.problems)


def test_npu_smi_chip_map_is_retried_until_it_works(npu_smi_dir):
    chip_map = npu_smi_dir / "npu-smi-data" / "map.txt"
    saved = chip_map.read_text()
    chip_map.unlink()
    npu_smi = NpuSmi(str(npu_smi_dir / "bin" / "npu-smi"))
    first = npu_smi.read([0])
    assert (first.values, first.failed) == ({}, 1)
    chip_map.write_text(saved)
    assert set(npu_smi.read([0]).values) == {0}


def test_missing_npu_smi_is_a_clear_message(tmp_path):
    with pytest.raises(CollectorUnavailable, match="is not installed or not on PATH"):
        NpuSmi(str(tmp_path / "no-such-npu-smi")).read()


# The segments of torch_npu.npu.memory_snapshot() (torch.cuda's schema), trimmed to the fields read.
SEGMENTS = [
    {"device": 2, "total_size": 96, "blocks": [
        {"size": 40, "state": "active_allocated"}, {"size": 24, "state": "inactive"},
        {"size": 32, "state": "inactive"}]},
    {"device": 2, "total_size": 64, "blocks": [
        {"size": 48, "state": "active_allocated"}, {"size": 16, "state": "active_pending_free"}]},
    {"device": 3, "total_size": 8, "blocks": [{"size": 8, "state": "inactive"}]},
]  # fmt: skip


class SegmentProvider(Provider):
    def __init__(self, stats_by_device: dict, segments: object) -> None:
        super().__init__(stats_by_device)
        self.segments = segments

    def memory_snapshot(self) -> object:
        if isinstance(self.segments, Exception):
            raise self.segments
        return self.segments


def test_the_largest_free_block_is_the_largest_inactive_block_of_the_devices_segments():
    reading = read_allocator(SegmentProvider({2: GOOD}, SEGMENTS), set())
    assert reading.values[2].largest_free_block_bytes == 32.0  # not 40 (allocated), not 8 (device 3, unread)
    assert reading.problems == []


def test_a_device_with_no_free_block_reports_zero_and_a_broken_snapshot_reports_nothing():
    busy = [{"device": 2, "blocks": [{"size": 40, "state": "active_allocated"}]}]
    assert read_allocator(SegmentProvider({2: GOOD}, busy), set()).values[2].largest_free_block_bytes == 0.0
    broken = read_allocator(SegmentProvider({2: GOOD}, RuntimeError("no allocator")), set())
    assert broken.values[2].largest_free_block_bytes is None
    assert broken.problems == ["torch_npu memory_snapshot failed: RuntimeError('no allocator')"]
    odd = read_allocator(SegmentProvider({2: GOOD}, {"segments": []}), set())
    assert odd.values[2].largest_free_block_bytes is None and "expected a list" in odd.problems[0]


def test_without_memory_snapshot_the_value_is_unknown():
    assert read_allocator(Provider({2: GOOD}), set()).values[2].largest_free_block_bytes is None


def test_torch_npu_stats_read_segments_only_once_the_runtime_is_initialized():
    calls = []
    npu = SimpleNamespace(
        is_initialized=lambda: bool(calls), memory_snapshot=lambda: calls.append(1) or SEGMENTS
    )
    stats = TorchNpuStats(SimpleNamespace(npu=npu))
    assert stats.memory_snapshot() == [] and calls == []
    calls.append(0)
    assert stats.memory_snapshot() == SEGMENTS
