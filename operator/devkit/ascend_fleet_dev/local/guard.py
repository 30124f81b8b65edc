"""The guard: ends every program a process started once that process is gone, however it went.

Run as a script (``python -I guard.py``, standard library only) with the read end of a pipe as its stdin; the
process that started it keeps the write end and writes one line per program: ``+<pgid>:<start>`` when it
starts a process group (``start``: the leader's start time, field 22 of ``/proc/<pid>/stat``), ``-<pgid>`` when
it has reaped it. A group whose leader now has another start time is someone else's (the id was reused) and is
left alone. When that process exits -- returning, SIGTERM, SIGKILL, a crash --
the kernel closes the write end, the guard reads end-of-file, sends SIGTERM to every group still listed, and
SIGKILL to those still there after the grace period. The guard runs in a session of its own, so a signal to the
test runner's process group does not end it before it has done its work.

A pipe rather than PR_SET_PDEATHSIG: the kernel sends that signal when the *thread* that forked the child
exits (a program started from a worker thread would die with the thread), and only to the direct child, not
to the workers an engine forks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

GRACE_SECONDS = 5.0


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group id was reused by someone else's processes
        return False
    return True


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _signal(groups: set[int], signum: int) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)


def end_groups(groups: set[int], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to every group, up to ``grace`` seconds for them to go, then SIGKILL to the rest."""
    groups = {g for g in groups if g > 1 and _alive(g)}
    _signal(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while groups and time.monotonic() < deadline:
        time.sleep(0.05)
        groups = {g for g in groups if _alive(g)}
    _signal(groups, signal.SIGKILL)


def watch(stream) -> set[int]:
    """Follow the ``+pgid:start``/``-pgid`` lines until end-of-file; the groups still ours then."""
    groups: dict[int, str] = {}
    for line in stream:
        text = line.strip()
        pgid, _, start = text[1:].partition(":")
        if text[:1] == "+" and pgid.isdigit():
            groups[int(pgid)] = start
        elif text[:1] == "-" and pgid.isdigit():
            groups.pop(int(pgid), None)
    # A leader that is gone leaves our orphans in the group; a leader with another start time is not ours.
    return {pgid for pgid, start in groups.items() if start_time(pgid) in (None, start)}


def main() -> None:
    # Terminal signals never reach a guard in its own session; these cover a signal to its own group only.
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    end_groups(watch(sys.stdin))


if __name__ == "__main__":
    main()
