"""`make test` installs what CI installs and runs every suite (the engine checks last), `make lint` checks the workflows.

Read through ``make -n`` (what make would run, nothing run) with an empty home, as on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def dry_run(target: str, home, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "MAKEFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=ROOT,
        env={**environ, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_test_installs_every_tool_of_the_suite_before_running_it(tmp_path):
    steps = dry_run("test", tmp_path)
    wanted = [
        "actionlint .github/workflows/*.yml",  # lint first
        ".venv/bin/mypy",
        "pip install -q --no-deps 'sglang==0.5.5'",  # SGLang's benchmark client for the tune tests
        "$package is not installed",  # lua5.1 for the Argo CD health check, or one line saying why not
        "apt-get install -y -qq --no-install-recommends prometheus",  # Prometheus and promtool, as root
        "-m ascend_fleet_dev.real.controlplane --build",  # the real control plane
        "ensure_picker",  # the endpoint picker
        "ensure_pd_sidecar",  # llm-d's P/D sidecar
        ".venv/bin/pytest",
    ]
    positions = [steps.find(step) for step in wanted]
    assert -1 not in positions, [step for step, at in zip(wanted, positions, strict=True) if at == -1]
    assert positions == sorted(positions), "the tools must be installed before pytest runs"


def test_what_cannot_be_installed_is_a_skip_here_and_a_failure_under_ci(tmp_path):
    steps = dry_run("test", tmp_path)
    assert '[ -z "$CI" ] && echo "So the tests that need Prometheus will be skipped."' in steps
    assert 'elif [ -n "$CI" ]; then echo "No Go toolchain: CI needs it' in steps
    assert 'elif [ -n "$CI" ]; then echo "CI needs $package' in steps


def test_ci_runs_make_test_which_ends_with_the_engine_checks(tmp_path):
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in script if line.strip() and not line.lstrip().startswith("#")]
    assert commands == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "make test"]
    steps = dry_run("test", tmp_path)
    assert steps.find("pytest --ignore=tests/engines") < steps.find("test-engines"), steps
