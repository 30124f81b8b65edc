"""The runtime apart from tooling: without the development extras or the dev kit the operator's commands still
work, and a development command says in one line what to install."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from ascend_fleet.cli.extras import EXTRA_OF_MODULE
from ascend_fleet.cli.plugins import DEV_KIT_COMMANDS
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "vllm-tp4-pp2-dp2.yaml"
DEV_ONLY = ("ascend_fleet_dev", "kmock", "rich", "tokenizers", "matplotlib")

# Runs the CLI in a fresh interpreter where the development-only packages cannot be imported, as after a
# plain `pip install ascend-fleet`.
_BLOCKED_CLI = """
import importlib.abc, sys

BLOCKED = set(sys.argv[1].split(","))

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocked())
from ascend_fleet.cli.main import main
code = main(sys.argv[2:])
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
assert not loaded, loaded
sys.exit(code)
"""


def _cli(*args: str, blocked: tuple[str, ...] = DEV_ONLY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_CLI, ",".join(blocked), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_the_runtime_dependencies_carry_no_development_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {
        requirement.split(">")[0].split("<")[0].split("=")[0].strip()
        for requirement in project["dependencies"]
    }
    assert runtime.isdisjoint({"kmock", "rich", "tokenizers", "aiohttp", "matplotlib"}), runtime
    extras = project["optional-dependencies"]
    for module, extra in EXTRA_OF_MODULE.items():
        assert any(requirement.startswith(module) for requirement in extras[extra]), (module, extra)
    assert "ascend-fleet[tune,plot]" in extras["dev"]


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--help"],
        ["validate", str(EXAMPLE)],
        ["render", str(EXAMPLE)],
        ["plan", str(EXAMPLE)],
        ["crd"],
    ],
    ids=["run", "validate", "render", "plan", "crd"],
)
def test_runtime_commands_work_without_the_extras(args: list[str]) -> None:
    result = _cli(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


@pytest.mark.parametrize("command", DEV_KIT_COMMANDS)
def test_a_dev_kit_command_without_the_dev_kit_names_what_to_install(command: str) -> None:
    result = _cli(command, "--real", blocked=("ascend_fleet_dev",))
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [
        f"error: `ascend-fleet {command}` comes with the dev kit: pip install ascend-fleet-dev"
    ]


@pytest.mark.parametrize("command", DEV_KIT_COMMANDS)
def test_the_dev_kit_adds_its_commands_through_entry_points(command: str) -> None:
    result = _cli(command, "--help", blocked=("kmock",))
    assert result.returncode == 0, result.stderr
    assert "--engines" in result.stdout and "dev kit" not in result.stdout
