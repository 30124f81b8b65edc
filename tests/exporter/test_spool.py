"""The spool directory: atomic records, dead processes dropped, stale and broken files skipped."""

import os
import subprocess
import sys

from ascend_fleet_exporter.allocator import AllocatorStats
from ascend_fleet_exporter.records import ProcessRecord
from ascend_fleet_exporter.spool import pid_alive, read_records, record_path, remove_record, write_record


def record(pid: int, written_at: float = 100.0) -> ProcessRecord:
    return ProcessRecord(pid, written_at, 5.0, allocator={"0": AllocatorStats(reserved_bytes=1.0)})


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid no longer exists
    return child.pid


def test_write_then_read(tmp_path):
    spool = tmp_path / "spool"
    write_record(spool, record(os.getpid()))
    write_record(spool, record(os.getpid(), written_at=101.0))  # a rewrite replaces the file
    read = read_records(spool, now=102.0)
    assert read.records == [record(os.getpid(), written_at=101.0)]
    assert read.problems == []
    assert sorted(p.name for p in spool.iterdir()) == [f"{os.getpid()}.json"]


def test_files_of_dead_processes_are_dropped_and_deleted(tmp_path):
    gone = dead_pid()
    write_record(tmp_path, record(gone))
    write_record(tmp_path, record(os.getpid()))
    read = read_records(tmp_path, now=100.0)
    assert [r.pid for r in read.records] == [os.getpid()]
    assert not record_path(tmp_path, gone).exists()


def test_stale_records_of_live_processes_are_skipped_but_kept(tmp_path):
    write_record(tmp_path, record(os.getpid(), written_at=0.0))
    read = read_records(tmp_path, now=60.0)
    assert read.records == []
    assert f"not rewritten for 60 s (more than 15 s); is process {os.getpid()} hung?" in read.problems[0]
    assert record_path(tmp_path, os.getpid()).exists()


def test_broken_and_foreign_files_are_skipped(tmp_path):
    record_path(tmp_path, os.getpid()).write_text("{half a rec")
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / f".{os.getpid()}.json.tmp").write_text("being written")
    read = read_records(tmp_path, now=100.0, alive=lambda pid: True)
    assert read.records == []
    assert len(read.problems) == 1 and read.problems[0].startswith(f"skipping {os.getpid()}.json: not JSON")


def test_a_file_must_hold_its_own_process_record(tmp_path):
    write_record(tmp_path, record(os.getpid()))
    record_path(tmp_path, os.getpid()).rename(record_path(tmp_path, 1))
    read = read_records(tmp_path, now=100.0, alive=lambda pid: True)
    assert read.records == [] and "holds the record of pid" in read.problems[0]


def test_missing_directory_reads_as_empty(tmp_path):
    read = read_records(tmp_path / "absent", now=0.0)
    assert (read.records, read.problems) == ([], [])


def test_remove_record(tmp_path):
    write_record(tmp_path, record(os.getpid()))
    remove_record(tmp_path, os.getpid())
    remove_record(tmp_path, os.getpid())  # twice is fine
    assert read_records(tmp_path, now=100.0).records == []


def test_liveness():
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())


def test_a_zombie_is_dead():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped yet
        assert not pid_alive(child.pid)
    finally:
        child.wait()
