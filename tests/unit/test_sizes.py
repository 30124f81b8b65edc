"""No module over 600 lines and no function over 80, in the three distributions, the benches and the tests: each
stays readable in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ascend_fleet
import ascend_fleet_dev
import ascend_fleet_exporter
from tests.support.paths import ROOT

PACKAGES = [
    Path(package.__file__).parent for package in (ascend_fleet, ascend_fleet_exporter, ascend_fleet_dev)
]
ROOTS = [*PACKAGES, ROOT / "bench", ROOT / "tests"]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """Each module under ``root`` longer than ``limit`` lines, with its length."""
    lengths = {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines()) for path in root.rglob("*.py")
    }
    return {module: lines for module, lines in sorted(lengths.items()) if lines > limit}


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Each function or method under ``root`` longer than ``limit`` lines (decorators included), with its length."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > limit:
                    found[f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name}"] = lines
    return found


@pytest.mark.parametrize("root", ROOTS, ids=lambda root: root.name)
def test_no_module_is_over_600_lines(root):
    assert long_modules(root) == {}


@pytest.mark.parametrize("root", ROOTS, ids=lambda root: root.name)
def test_no_function_is_over_80_lines(root):
    assert long_functions(root) == {}


def test_the_checks_name_what_is_too_long(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(4))
    (tmp_path / "big.py").write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    assert long_functions(tmp_path, limit=4) == {"big.py:1 long": 5}
    assert long_modules(tmp_path, limit=8) == {"big.py": 9}
    assert long_modules(tmp_path, limit=9) == {}
