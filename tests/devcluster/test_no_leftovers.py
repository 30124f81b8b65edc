"""Nothing is left behind: a process that started dev-cluster programs (Prometheus, a stand-in engine that forks
a worker, a plain program) and is then ended by SIGTERM or SIGKILL, without stopping anything itself, leaves no
program, worker or grandchild running: its guard ends their process groups."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascend_fleet_dev.local.guard import end_groups, start_time, watch

# The parent: starts the programs the way the dev cluster does (LocalProcess), records every pid, then waits
# to be killed. The stand-in engine forks a worker in its own group, as `vllm serve` forks its engine core.
PARENT = """
import json, subprocess, sys, threading, time
from ascend_fleet_dev.local.process import LocalProcess

out, with_prometheus = sys.argv[1], sys.argv[2] == "1"
engine = LocalProcess(
    "engine",
    [sys.executable, "-c",
     "import subprocess, sys, time\\n"
     "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\\n"
     "print(worker.pid, flush=True)\\n"
     "time.sleep(600)\\n"],
    log=out + ".engine.log",
    process_group=True,
)
plain = LocalProcess("plain", [sys.executable, "-c", "import time; time.sleep(600)"])
# Started from a worker thread that then ends: the guard does not depend on the starting thread.
starter = threading.Thread(target=plain.start)
starter.start(); starter.join()
engine.start()
pids = {"engine": engine.pid, "plain": plain.pid}
if with_prometheus:
    from ascend_fleet_dev.fleet.prometheus import PrometheusServer
    pids["prometheus"] = PrometheusServer().start().pid
engine.wait_ready(lambda: open(out + ".engine.log").read().strip() != "", timeout=30)
pids["worker"] = int(open(out + ".engine.log").read().split()[0])
open(out, "w").write(json.dumps(pids))
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: dict[str, int], seconds: float) -> dict[str, int]:
    deadline = time.monotonic() + seconds
    left = dict(pids)
    while left and time.monotonic() < deadline:
        left = {name: pid for name, pid in left.items() if alive(pid)}
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_parent_leaves_no_process(tmp_path, signum):
    record = tmp_path / "pids.json"
    with_prometheus = shutil.which("prometheus") is not None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(record), "1" if with_prometheus else "0"],
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not record.exists() and parent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert record.exists(), f"the parent did not start its programs (exit {parent.poll()})"
        pids = json.loads(record.read_text())
        assert len(pids) == (4 if with_prometheus else 3)
        assert all(alive(pid) for pid in pids.values())
        parent.send_signal(signum)
        assert parent.wait(10) == -signum
        left = wait_gone(pids, 15)  # SIGTERM, then SIGKILL after the guard's 5 s grace
        assert not left, f"left running after the parent's {signum.name}: {left}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in json.loads(record.read_text()).values() if record.exists() else ():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_guard_follows_its_list_and_ends_what_is_listed_at_the_end(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        ours = f"+{sleeper.pid}:{start_time(sleeper.pid)}\n"
        reused = f"+{os.getpid()}:1\n"  # a live leader with another start time: someone else's group
        listed = watch([ours, reused, "+999999999:5\n", "-999999999\n", "junk\n"])
        assert listed == {sleeper.pid}
        end_groups(listed, grace=2)
        assert sleeper.wait(5) == -signal.SIGTERM
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
