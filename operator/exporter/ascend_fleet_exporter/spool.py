"""The per-pod spool directory: one small JSON file per engine process, ``<pid>.json``.

Writers replace their file atomically (write a temporary file, then rename), so a reader never sees
half a record. Readers drop the files of processes that are gone, so a crashed rank's devices
disappear from ``/metrics`` at the next scrape instead of freezing at their last values.

All writers and the reader must share a PID namespace (the processes of one container do).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ascend_fleet_exporter.records import ProcessRecord, decode, encode, stale_after

_SUFFIX = ".json"


@dataclass(frozen=True)
class SpoolRead:
    """Live records, and a line for each file that was skipped for being unreadable or stale."""

    records: list[ProcessRecord]
    problems: list[str]


def record_path(directory: Path, pid: int) -> Path:
    """The file of the process ``pid``."""
    return directory / f"{pid}{_SUFFIX}"


def write_record(directory: Path, record: ProcessRecord) -> None:
    """Publish ``record`` as the file of its process, atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    target = record_path(directory, record.pid)
    temporary = directory / f".{record.pid}{_SUFFIX}.tmp"
    temporary.write_text(encode(record), encoding="utf-8")
    os.replace(temporary, target)


def remove_record(directory: Path, pid: int) -> None:
    """Withdraw the file of ``pid``, if any (a clean shutdown)."""
    record_path(directory, pid).unlink(missing_ok=True)


def read_records(directory: Path, now: float, alive: Callable[[int], bool] | None = None) -> SpoolRead:
    """The records of live processes that wrote recently.

    Files of dead processes are deleted. Files that are stale (written too long ago) or malformed
    are skipped and reported; they are left in place because their process may still recover.
    """
    alive = alive or pid_alive
    records: list[ProcessRecord] = []
    problems: list[str] = []
    try:
        paths = sorted(directory.glob(f"*{_SUFFIX}"))
    except OSError as error:
        return SpoolRead([], [f"cannot list {directory}: {error}"])
    for path in paths:
        if not path.stem.isdigit():
            continue
        pid = int(path.stem)
        if not alive(pid):
            path.unlink(missing_ok=True)
            continue
        try:
            record = decode(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue  # its process withdrew it while we listed the directory
        except (OSError, ValueError) as error:
            problems.append(f"skipping {path.name}: {error}")
            continue
        if record.pid != pid:
            problems.append(f"skipping {path.name}: it holds the record of pid {record.pid}")
        elif record.stale(now):
            problems.append(
                f"skipping {path.name}: not rewritten for {now - record.written_at:.0f} s "
                f"(more than {stale_after(record.interval):.0f} s); is process {pid} hung?"
            )
        else:
            records.append(record)
    return SpoolRead(records, problems)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an exited child nobody has reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True  # no procfs: trust kill(0)
    # The state follows the command name, which is in parentheses and may itself contain ") ".
    state = stat.rpartition(")")[2].split()[:1]
    return state != ["Z"]
