"""The one process lifecycle of the dev cluster, on real small Python programs."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.local.process import LocalProcess, ProcessFailed


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_ready_when_the_probe_answers_and_stopped_by_sigterm(tmp_path: Path) -> None:
    port = free_port()
    server = LocalProcess(
        "server",
        _python(
            "import os, socket, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', int(os.environ['PORT']))); s.listen()\n"
            "print('listening', flush=True)\n"
            "time.sleep(60)\n"
        ),
        env={"PORT": str(port)},
        cwd=tmp_path,
        log=tmp_path / "server.log",
    )
    server.start()
    assert server.pid is not None
    server.wait_ready(lambda: _listening(port), timeout=20)
    assert server.running
    assert "listening" in server.log_tail()
    started = time.monotonic()
    server.stop(grace=10)
    assert not server.running
    assert server.returncode == -15  # SIGTERM, well within the grace period
    assert time.monotonic() - started < 5
    assert not _listening(port)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    stubborn = LocalProcess(
        "stubborn",
        _python(
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ignoring', flush=True)\n"
            "time.sleep(60)\n"
        ),
        log=tmp_path / "stubborn.log",
    ).start()
    stubborn.wait_ready(lambda: "ignoring" in stubborn.log_tail(), timeout=20)
    started = time.monotonic()
    stubborn.stop(grace=0.5)
    elapsed = time.monotonic() - started
    assert stubborn.returncode == -9
    assert 0.5 <= elapsed < 5


def test_stopping_a_process_group_ends_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = LocalProcess(
        "parent",
        _python(
            "import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "time.sleep(60)\n"
        ),
        process_group=True,
    ).start()
    parent.wait_ready(lambda: pid_file.exists() and pid_file.read_text() != "", timeout=20)
    child = int(pid_file.read_text())
    parent.stop(grace=5)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or "Z" in _state(child)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_an_exit_before_ready_fails_with_the_log_tail(tmp_path: Path) -> None:
    broken = LocalProcess(
        "broken", _python("import sys; print('bad flag --nope'); sys.exit(3)"), log=tmp_path / "broken.log"
    ).start()
    with pytest.raises(ProcessFailed, match=r"(?s)broken exited \(3\).*bad flag --nope"):
        broken.wait_ready(lambda: False, timeout=20)


def test_not_ready_in_time_fails_and_the_process_can_still_be_stopped(tmp_path: Path) -> None:
    silent = LocalProcess(
        "silent", _python("import time; time.sleep(60)"), log=tmp_path / "silent.log"
    ).start()
    with pytest.raises(ProcessFailed, match="silent was not ready within 0.3s"):
        silent.wait_ready(lambda: False, timeout=0.3)
    assert silent.running
    silent.kill()
    assert silent.returncode == -9


def test_inherit_passes_on_only_the_named_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEPT_VARIABLE", "kept")
    monkeypatch.setenv("HIDDEN_VARIABLE", "hidden")
    printer = LocalProcess(
        "printer",
        _python(
            "import os\n"
            "print(sorted(k for k in os.environ if k.endswith('_VARIABLE')), os.environ['OWN'], flush=True)\n"
        ),
        env={"OWN": "own"},
        log=tmp_path / "printer.log",
        inherit=["KEPT_VARIABLE", "ABSENT_VARIABLE"],
    ).start()
    deadline = time.monotonic() + 20
    while printer.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert printer.returncode == 0
    assert "['KEPT_VARIABLE'] own" in printer.log_tail()
