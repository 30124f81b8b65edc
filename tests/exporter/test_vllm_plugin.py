"""The vLLM general plugin: declared, importable without vLLM or torch_npu, and starting only where a device is bound."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap
import time
import tomllib

import pytest

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.local.process import guarded_popen
from ascend_fleet_exporter import metrics

from .scrape import by_device, parse, scrape
from .support import DATA, SOURCE_ROOT, child_env, free_port, port_free

GROUP, NAME, TARGET = (
    "vllm.general_plugins",
    "ascend_fleet_exporter",
    "ascend_fleet_exporter.vllm_plugin:register",
)
PYPROJECT = SOURCE_ROOT / "pyproject.toml"

FAKE_TORCH_NPU = '''
"""A stand-in for torch_npu with only what the exporter touches; set_device is the engine binding a device."""
import json, os
from types import SimpleNamespace

_state = {"device": None}
_stats = json.loads(open(os.environ["FAKE_TORCH_NPU_STATS"]).read())


def _memory_stats(device):
    if _state["device"] is None:
        raise RuntimeError("Invalid device argument: did you call init?")
    return _stats if device == _state["device"] else {key: 0 for key in _stats}


npu = SimpleNamespace(
    is_initialized=lambda: _state["device"] is not None,
    device_count=lambda: 4,
    memory_stats=_memory_stats,
    set_device=lambda device: _state.update(device=device),
)
'''


def test_the_entry_point_is_declared_and_loads():
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"][GROUP]
    assert declared[NAME] == TARGET
    register = importlib.metadata.EntryPoint(NAME, TARGET, GROUP).load()
    assert callable(register) and register.__name__ == "register"


def test_the_installed_distribution_declares_it_too():
    ours = [ep for ep in importlib.metadata.entry_points(group=GROUP) if ep.name == NAME]
    if not ours:
        pytest.skip("ascend-fleet is not installed in this environment (run from the source tree)")
    assert ours[0].value == TARGET


@pytest.mark.parametrize("enabled", ["0", "1"])
def test_register_imports_neither_vllm_nor_torch(enabled, tmp_path):
    # An installed torch_npu that nothing binds: the watcher waits (without one it would serve "no NPU").
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("raise SystemExit('imported torch_npu')\n")
    script = textwrap.dedent("""
        import json, sys, threading
        from ascend_fleet_exporter import vllm_plugin
        vllm_plugin.register()
        vllm_plugin.register()
        heavy = [m for m in ("vllm", "torch", "torch_npu", "sglang") if m in sys.modules]
        watchers = [t.name for t in threading.enumerate() if t.name.startswith("ascend-fleet-exporter")]
        print(json.dumps({"heavy": heavy, "watchers": watchers}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=child_env({"ASCEND_FLEET_EXPORTER": enabled}, python_path=[tmp_path]),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["heavy"] == []
    # Once per process, and nothing at all when the switch is off.
    assert report["watchers"] == (["ascend-fleet-exporter-watch"] if enabled == "1" else [])


def fragmentation_shown(port: int) -> dict | None:
    series = parse(scrape(port)[0])
    return series if metrics.MEMORY_FRAGMENTATION_RATIO in series else None


def test_the_exporter_starts_only_once_the_engine_binds_a_device(tmp_path):
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text(FAKE_TORCH_NPU)
    port = free_port()
    script = textwrap.dedent("""
        import sys, threading
        from ascend_fleet_exporter import vllm_plugin
        vllm_plugin.register()
        import torch_npu  # the engine imports it ...
        print("imported", flush=True)
        device = int(sys.stdin.readline())  # ... and binds a device when the test says so
        torch_npu.npu.set_device(device)
        threading.Event().wait()
    """)
    env = child_env(
        {
            "ASCEND_FLEET_EXPORTER": "1",
            "ASCEND_FLEET_EXPORTER_PORT": str(port),
            "ASCEND_FLEET_EXPORTER_INTERVAL": "0.1",
            "ASCEND_FLEET_EXPORTER_DIR": str(tmp_path / "spool"),
            "FAKE_TORCH_NPU_STATS": str(DATA / "memory_stats_fragmented.json"),
            "PATH": "/nonexistent",
        },  # no npu-smi: allocator metrics alone
        python_path=[tmp_path],
    )
    engine = guarded_popen(
        [sys.executable, "-c", script], env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert engine.stdin is not None and engine.stdout is not None
        assert engine.stdout.readline().strip() == "imported"
        time.sleep(0.5)  # several polls of the watcher: nothing may start before a device is bound
        assert port_free(port)
        engine.stdin.write("2\n")
        engine.stdin.flush()
        series = wait_for(lambda: fragmentation_shown(port))
        assert by_device(series, metrics.MEMORY_FRAGMENTATION_RATIO) == {"2": 0.25}
        assert by_device(series, metrics.ALLOC_RETRIES_TOTAL) == {"2": 12}
    finally:
        engine.kill()
        engine.wait()
