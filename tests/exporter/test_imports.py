"""No exporter module imports torch, torch_npu, vLLM or SGLang when it is imported or registered."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap

import ascend_fleet_exporter

from .support import child_env

HEAVY = ("torch", "torch_npu", "vllm", "sglang")
MODULES = sorted(
    f"ascend_fleet_exporter.{m.name}" for m in pkgutil.iter_modules(ascend_fleet_exporter.__path__)
)


def test_the_list_of_modules_is_complete():
    assert "ascend_fleet_exporter.vllm_plugin" in MODULES and "ascend_fleet_exporter.allocator" in MODULES


def test_importing_and_registering_touches_no_engine_package(tmp_path):
    # Stand-ins that fail loudly: the test fails even where the real packages are installed.
    for name in HEAVY:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise SystemExit('imported {name}')\n")
    script = textwrap.dedent(f"""
        import importlib
        for name in {MODULES!r}:
            importlib.import_module(name)
        from ascend_fleet_exporter import vllm_plugin
        vllm_plugin.register()
        print("clean")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=child_env({"ASCEND_FLEET_EXPORTER": "1"}, python_path=[tmp_path]),
    )
    assert (done.returncode, done.stdout.strip()) == (0, "clean"), done.stderr
