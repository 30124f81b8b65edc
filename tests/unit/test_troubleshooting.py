"""docs/troubleshooting.md explains every condition type, condition reason and Event reason the operator uses.

The reasons are read from the operator's source, not listed here: the string (or module constant) given as
the reason to ``Event(...)``, ``set_condition(...)``, ``kube.event(...)`` and ``MetricsStatus(...)``, the
reasons ``_progress`` returns, and every ``REASON_*`` constant. A new reason without a row fails the test.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from ascend_fleet.api.actions import ACTIONS
from tests.support.paths import ROOT

PACKAGE = ROOT / "operator" / "ascend_fleet"
SOURCES = [
    path
    for folder in ("reconcile", "control", "status", "handlers", "kube")
    for path in sorted((PACKAGE / folder).glob("*.py"))
]
PAGE = ROOT / "docs" / "troubleshooting.md"
# The Event reasons of carried-out rule actions: control/loop.py builds EVENT_REASONS from the actions table.
TABLES = {"EVENT_REASONS": [kind.event_reason for kind in ACTIONS]}
# Call name -> positions of its arguments that are a condition type or a reason.
REASON_ARGUMENTS = {"Event": (1,), "set_condition": (1, 3), "event": (2,), "MetricsStatus": (1,)}


def constants(trees: list[ast.Module]) -> dict[str, list[str]]:
    """Module-level names bound to a string, or to a dict of strings (its values), across the sources."""
    found: dict[str, list[str]] = {name: list(values) for name, values in TABLES.items()}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                value = node.value
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found[node.targets[0].id] = [value.value]
                elif isinstance(value, ast.Dict):
                    found[node.targets[0].id] = [
                        v.value
                        for v in value.values
                        if isinstance(v, ast.Constant) and isinstance(v.value, str)
                    ]
    for tree in trees:  # a local name bound to an entry of such a dict (``reason = EVENT_REASONS[action]``)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Subscript)
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id in found
            ):
                found.setdefault(node.targets[0].id, []).extend(found[node.value.value.id])
    return found


def resolve(node: ast.expr, known: dict[str, list[str]]) -> Iterator[str]:
    """The strings an argument can be: a literal, a constant, either branch of an if, a prefix + constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Name):
        yield from known.get(node.id, [])
    elif isinstance(node, ast.IfExp):
        yield from resolve(node.body, known)
        yield from resolve(node.orelse, known)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        for left in [*resolve(node.left, known), ""]:
            for right in resolve(node.right, known):
                yield left + right
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        yield from known.get(node.value.id, [])


def reasons_in_code() -> set[str]:
    trees = [ast.parse(path.read_text()) for path in SOURCES]
    known = constants(trees)
    found = {value for name, values in known.items() if name.startswith("REASON_") for value in values}
    starred: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = (
                    node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                )
                for index in REASON_ARGUMENTS.get(name, ()):
                    if index < len(node.args):
                        found |= set(resolve(node.args[index], known))
                if name == "set_condition":  # ``set_condition(conditions, type, *(status, reason, message))``
                    starred |= {
                        arg.value.id
                        for arg in node.args
                        if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name)
                    }
            elif isinstance(node, ast.FunctionDef) and node.name == "_progress":
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
                        found |= set(resolve(ret.value.elts[1], known))
    for tree in trees:  # the (status, reason, message) tuples those calls spread
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in starred
                and isinstance(node.value, ast.Tuple)
                and len(node.value.elts) > 1
            ):
                found |= set(resolve(node.value.elts[1], known))
    return {word for word in found if re.fullmatch(r"[A-Z][A-Za-z]+", word)}


def test_the_collector_finds_reasons_of_every_kind():
    found = reasons_in_code()
    for reason in ("Ready", "MetricsAvailable", "AllReplicasReady", "Converged", "ReplicaRestart"):
        assert reason in found
    for reason in (
        "PrometheusUnauthorized",
        "ScaleUp",
        "DryRunScaleUp",
        "NameConflict",
        "RoutingUnavailable",
    ):
        assert reason in found
    assert "Normal" not in found and "Warning" not in found


def test_every_reason_has_its_words_in_the_troubleshooting_page():
    page = PAGE.read_text()
    missing = sorted(reason for reason in reasons_in_code() if f"`{reason}`" not in page)
    assert not missing, f"docs/troubleshooting.md does not explain: {', '.join(missing)}"


def test_sources_exist():
    assert all(isinstance(path, Path) and path.exists() for path in SOURCES) and len(SOURCES) > 10
