"""Memory snapshots on demand: POST /memory-snapshot, every process with an NPU writes its torch_npu snapshot."""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from ascend_fleet.kube import wait_for
from ascend_fleet_exporter.collectors import TorchNpuStats
from ascend_fleet_exporter.config import ExporterConfig
from ascend_fleet_exporter.runtime import Exporter
from ascend_fleet_exporter.snapshot import NO_TORCH_NPU, SnapshotTaker, request_snapshot, snapshot_dir

from .scrape import scrape
from .support import free_port
from .test_collectors import GOOD, Provider


class FakeTorchNpu:
    """A torch_npu with only ``npu.memory._dump_snapshot``, which records its calls and writes the file."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.npu = SimpleNamespace(memory=SimpleNamespace(_dump_snapshot=self.dump))

    def dump(self, path: str) -> None:
        self.calls.append(path)
        Path(path).write_bytes(b"segments and blocks")


def post(port: int) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/memory-snapshot", data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=2.0) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8")


@pytest.fixture
def config(tmp_path) -> ExporterConfig:
    return ExporterConfig(port=free_port(), interval=0.1, spool_dir=tmp_path / "spool", snapshots=True)


def test_a_request_makes_each_process_with_an_npu_dump_its_snapshot_once(config, monkeypatch):
    fake = FakeTorchNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    exporter = Exporter(config, Provider({3: GOOD}), None).start()
    try:
        wait_for(lambda: exporter.serving, 10, "the exporter's port")
        status, text = post(config.port)
        assert status == 202, text
        request_id = text.split()[1]
        expected = snapshot_dir(config.spool, request_id) / f"{exporter.pid}.pickle"
        assert str(snapshot_dir(config.spool, request_id)) in text and "kubectl cp" in text
        wait_for(lambda: expected.exists(), 10, "the snapshot file")
        assert fake.calls == [str(expected)]
        assert expected.read_bytes() == b"segments and blocks"
        listed, _ = scrape(config.port, "/memory-snapshot")
        assert listed.splitlines() == [str(expected)]
        # One request, one snapshot: the samples of the next few intervals do not dump again.
        time.sleep(5 * config.interval)
        assert len(fake.calls) == 1
    finally:
        exporter.stop()


def test_without_torch_npu_the_request_is_answered_with_a_sentence(config, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # torch_npu cannot be imported
    exporter = Exporter(config, TorchNpuStats(), None).start()
    try:
        wait_for(lambda: exporter.serving and exporter.backend == "none", 10, "an exporter without torch_npu")
        status, text = post(config.port)
    finally:
        exporter.stop()
    assert status == 501
    assert text.strip() == NO_TORCH_NPU
    assert "torch_npu is not installed in this engine's environment" in text
    assert not (config.spool / "snapshots").exists()


def test_a_process_started_after_a_request_does_not_answer_it(tmp_path):
    request_snapshot(tmp_path, 5.0, now=1_800_000_000.0)
    assert SnapshotTaker(tmp_path, pid=7).take_if_requested() is None


def test_a_torch_npu_without_dump_snapshot_leaves_a_note_instead(tmp_path, monkeypatch):
    monkeypatch.setitem(
        sys.modules, "torch_npu", SimpleNamespace(npu=SimpleNamespace(memory=SimpleNamespace()))
    )
    taker = SnapshotTaker(tmp_path, pid=7)
    answer = request_snapshot(tmp_path, 5.0, now=1_800_000_000.0)
    note = taker.take_if_requested()
    assert answer.status == 202 and note is not None and note.name == "7.txt"
    assert "no npu.memory._dump_snapshot" in note.read_text()
    assert taker.take_if_requested() is None
