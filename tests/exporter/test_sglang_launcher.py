"""The SGLang launcher: every argument reaches sglang.launch_server, spawned workers arm the exporter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .support import child_env

LAUNCHER = [sys.executable, "-m", "ascend_fleet_exporter.sglang"]
ARGS = [
    "--model-path",
    "/models/Qwen2.5-7B-Instruct",
    "--tp-size",
    "2",
    "--served-model-name",
    "qwen 7b",
    "--device",
    "npu",
    "--attention-backend",
    "ascend",
    "--enable-metrics",
]

# A stand-in SGLang: launch_server's __main__ block spawns a worker (as SGLang starts its schedulers)
# and prints what it saw; the worker's target lives in an importable module, as SGLang's do.
FAKE_LAUNCH_SERVER = """
import json, multiprocessing, sys
from sglang.worker import report

if __name__ == "__main__":
    from ascend_fleet_exporter import runtime

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=report, args=(queue,))
    worker.start()
    print(json.dumps({"argv": sys.argv, "armed": runtime.is_armed(), "worker": queue.get(timeout=30)}))
    worker.join()
"""
FAKE_WORKER = """
import sys


def report(queue):
    from ascend_fleet_exporter import runtime

    queue.put({"armed": runtime.is_armed(), "main": sys.modules["__main__"].__spec__.name})
"""


@pytest.fixture
def fake_sglang(tmp_path):
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_LAUNCH_SERVER)
    (package / "worker.py").write_text(FAKE_WORKER)
    return tmp_path


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_arguments_are_forwarded_and_spawned_workers_arm_the_exporter(fake_sglang, enabled):
    done = subprocess.run(
        [*LAUNCHER, *ARGS],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env({"ASCEND_FLEET_EXPORTER": enabled}, python_path=[fake_sglang]),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["argv"] == [str(fake_sglang / "sglang" / "launch_server.py"), *ARGS]
    on = enabled == "1"
    assert report["armed"] is on
    # The worker re-imported the launcher as its __mp_main__, and that import armed it.
    assert report["worker"] == {"armed": on, "main": "ascend_fleet_exporter.sglang"}


def test_without_sglang_a_clear_message_and_status_2():
    done = subprocess.run(
        [*LAUNCHER, *ARGS],
        capture_output=True,
        text=True,
        timeout=30,
        env=child_env({"ASCEND_FLEET_EXPORTER": "1"}),
    )
    assert done.returncode == 2
    assert "sglang.launch_server is not importable: SGLang is not installed" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
