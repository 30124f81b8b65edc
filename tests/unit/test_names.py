"""Every public top-level name of each distribution's package is defined in one module, so an import names one
thing."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import ascend_fleet
import ascend_fleet_dev
import ascend_fleet_exporter

# The three distributions' packages: a name is one thing within each program.
PACKAGES = [
    Path(package.__file__).parent for package in (ascend_fleet, ascend_fleet_exporter, ascend_fleet_dev)
]
# Each CLI module has its own ``register`` (its subcommands) and ``main`` (its entry point) by convention.
ENTRY_POINTS = frozenset({"register", "main"})


def defined_names(tree: ast.Module) -> list[str]:
    """The names a module's top-level statements define: functions, classes and assignments."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def public_definitions(root: Path) -> dict[str, set[str]]:
    """Each public top-level name (entry points aside) and the modules under ``root`` that define it."""
    modules: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        for name in defined_names(ast.parse(path.read_text(), filename=str(path))):
            if not name.startswith("_") and name not in ENTRY_POINTS:
                modules[name].add(path.relative_to(root).as_posix())
    return modules


def twice_defined(root: Path) -> dict[str, list[str]]:
    """The public names defined by more than one module under ``root``, with those modules."""
    return {name: sorted(paths) for name, paths in public_definitions(root).items() if len(paths) > 1}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda path: path.name)
def test_no_public_name_is_defined_in_two_modules(package: Path):
    assert twice_defined(package) == {}


def test_the_check_names_a_duplicate_and_allows_entry_points(tmp_path):
    (tmp_path / "one.py").write_text("LIMIT = 1\ndef main(): ...\n_log = None\n")
    (tmp_path / "two.py").write_text("LIMIT: int = 2\ndef main(): ...\n_log = None\nclass Other: ...\n")
    assert twice_defined(tmp_path) == {"LIMIT": ["one.py", "two.py"]}
