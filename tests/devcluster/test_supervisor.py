"""The supervisor of the dev cluster's programs: a killed program is reaped and started again, a held one stays
down until released, and quick deaths back off."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_fleet.kube import WaitTimeout, wait_for
from ascend_fleet_dev.local.process import LocalProcess
from ascend_fleet_dev.local.supervisor import (
    FIRST_BACKOFF_SECONDS,
    MAX_BACKOFF_SECONDS,
    STABLE_SECONDS,
    Supervisor,
    restart_delay,
)
from tests.support.procfs import process_state


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    watcher = Supervisor("test", poll_seconds=0.05).start()
    yield watcher
    watcher.stop()


def _sleeper(tmp_path: Path, name: str = "sleeper") -> LocalProcess:
    code = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"
    return LocalProcess(name, [sys.executable, "-c", code], log=tmp_path / f"{name}.log").start()


def test_a_killed_program_is_reaped_and_started_again(supervisor: Supervisor, tmp_path: Path) -> None:
    sleeper = _sleeper(tmp_path)
    supervisor.watch(sleeper)
    first = sleeper.pid
    assert first is not None
    wait_for(lambda: "up" in sleeper.log_tail(), 20, "the sleeper's first line")
    os.kill(first, signal.SIGKILL)  # from outside, as a crash or an OOM kill would
    wait_for(lambda: sleeper.running and sleeper.pid != first, 20, "the sleeper started again")
    assert process_state(first) is None, "the killed process was left a zombie"
    assert supervisor.restarts("sleeper") == 1
    assert supervisor.exits("sleeper") == [-signal.SIGKILL]
    # The restart appends to the same log.
    wait_for(lambda: sleeper.log_tail().count("up") == 2, 20, "the restarted sleeper's line")
    supervisor.forget("sleeper", grace=5)
    assert not sleeper.running


def test_a_held_program_stays_down_until_released(supervisor: Supervisor, tmp_path: Path) -> None:
    sleeper = _sleeper(tmp_path)
    supervisor.watch(sleeper)
    first = sleeper.pid
    assert first is not None
    supervisor.hold("sleeper", grace=5)
    assert not sleeper.running and process_state(first) is None
    with pytest.raises(WaitTimeout):
        wait_for(lambda: sleeper.running, 3 * FIRST_BACKOFF_SECONDS, "a restart", interval=0.05)
    assert supervisor.held("sleeper") and supervisor.restarts("sleeper") == 0
    supervisor.release("sleeper")
    assert sleeper.running and sleeper.pid != first
    assert supervisor.restarts("sleeper") == 0  # a planned start is not a restart after a death
    supervisor.forget("sleeper", grace=5)


def test_quick_deaths_back_off_and_a_stable_run_resets_the_backoff() -> None:
    assert restart_delay(FIRST_BACKOFF_SECONDS, 0.5) == (FIRST_BACKOFF_SECONDS, 2 * FIRST_BACKOFF_SECONDS)
    assert restart_delay(8.0, 0.5) == (8.0, 16.0)
    assert restart_delay(MAX_BACKOFF_SECONDS, 0.5) == (MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS)
    assert restart_delay(16.0, STABLE_SECONDS) == (FIRST_BACKOFF_SECONDS, 2 * FIRST_BACKOFF_SECONDS)


def test_a_program_that_keeps_dying_is_restarted_with_growing_waits(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    dying = LocalProcess("dying", [sys.executable, "-c", "raise SystemExit(3)"], log=tmp_path / "d.log")
    supervisor.watch(dying.start())
    # Waits of 1 s and 2 s: the second restart comes after about 3 s, not at once.
    wait_for(lambda: supervisor.restarts("dying") >= 2, 20, "two restarts")
    assert supervisor.exits("dying")[:2] == [3, 3]
    assert supervisor.restarts("dying") < 4, "restarted without backing off"
    supervisor.forget("dying")


def test_an_unknown_program_is_named_in_the_error(supervisor: Supervisor) -> None:
    with pytest.raises(LookupError, match="nothing"):
        supervisor.hold("nothing")
