"""The API reference (docs/api.md), generated from the CRD's schema, which is generated from the models.

``python -m ascend_fleet.api.reference > docs/api.md`` writes it; a test keeps the checked-in page current.
Each object of the schema gets a section with a table of its fields: name, type, constraints and the
field's description, in the order the models declare them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from . import names
from .checks import WINDOW_PATTERN
from .crd import crd
from .k8s import QUANTITY_PATTERN
from .units import DURATION_PATTERN

HEADER = f"""# API reference: {names.KIND} ({names.API_VERSION})

Generated from the operator's models by `python -m ascend_fleet.api.reference > docs/api.md`; do not edit by
hand. `kubectl explain {names.SINGULAR}.spec` shows the same descriptions. Durations are written `30s`, `5m`,
`1h30m` or as a number of seconds; quantities as Kubernetes writes them (`16Gi`, `500m`). A field marked
**required** must be set; every other field has the default its description gives, or is off when unset.
Every string, list and map of the spec has a bound, so the API server refuses an oversized object before the
operator reads it; the free-form objects (a volume, a valueFrom, the template's pod spec) are Kubernetes' own
types.
"""


def schema() -> dict[str, Any]:
    """The openAPIV3Schema of the served version."""
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def sections(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object with named fields, depth first, as (dotted path, node); list items get ``[]``."""
    if node.get("properties"):
        yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from sections(child, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict):
        yield from sections(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from sections(node["additionalProperties"], f"{path}{{}}")


def type_of(node: dict[str, Any]) -> str:
    """A field's type in words: string, integer, list of X, map of string to X, duration or quantity."""
    if node.get("x-kubernetes-int-or-string"):
        return {DURATION_PATTERN: "duration", WINDOW_PATTERN: "duration", QUANTITY_PATTERN: "quantity"}.get(
            node.get("pattern", ""), "int or string"
        )
    if node.get("x-kubernetes-preserve-unknown-fields") and not node.get("properties"):
        return "object (free-form)"
    kind = node.get("type", "")
    if kind == "array":
        return f"list of {type_of(node.get('items') or {})}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of string to {type_of(node['additionalProperties'])}"
    if kind == "object" and node.get("properties"):
        return "object"
    return kind or "any"


def constraints(node: dict[str, Any]) -> str:
    """Enum values and bounds, as a short phrase (empty when there are none)."""
    said = []
    if "enum" in node:
        said.append("one of " + ", ".join(f"`{value}`" for value in node["enum"]))
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None:
        said.append(f"{'>' if node.get('exclusiveMinimum') else '>='} {low:g}")
    if high is not None:
        said.append(f"{'<' if node.get('exclusiveMaximum') else '<='} {high:g}")
    if node.get("minLength") == 1:
        said.append("non-empty")
    elif "minLength" in node:
        said.append(f"at least {node['minLength']} characters")
    if "maxLength" in node:
        said.append(f"at most {node['maxLength']} characters")
    for key, words in (
        ("minItems", "at least {} items"),
        ("maxItems", "at most {} items"),
        ("maxProperties", "at most {} entries"),
    ):
        if key in node:
            said.append(words.format(node[key]).replace("1 items", "1 item").replace("1 entries", "1 entry"))
    for key, words in (
        ("items", "each at most {} characters"),
        ("additionalProperties", "values at most {} characters"),
    ):
        inner = node.get(key)
        if isinstance(inner, dict) and "maxLength" in inner and not inner.get("properties"):
            said.append(words.format(inner["maxLength"]))
    return "; ".join(said)


# The API server allows no description on the top-level metadata schema; the page still says what it is.
ROOT_FIELDS = {"metadata": "Standard object metadata: name, namespace, labels, annotations."}


def describe(path: str, node: dict[str, Any]) -> str:
    """A field's description, from the schema (or, for the top-level metadata, the page's own words)."""
    return node.get("description") or ROOT_FIELDS.get(path, "")


def _cell(text: str) -> str:
    # A table cell is one line, and a bar would end it.
    return " ".join(str(text).split()).replace("|", "\\|")


def section(path: str, node: dict[str, Any]) -> list[str]:
    """One object's heading, description and field table."""
    required = set(node.get("required") or [])
    lines = [f"## `{path}`" if path else f"## {names.KIND}", ""]
    if node.get("description"):
        lines += [_cell(node["description"]), ""]
    lines += ["| Field | Type | Constraints | Description |", "| --- | --- | --- | --- |"]
    for key, child in node["properties"].items():
        name = f"`{key}`" + (" **required**" if key in required else "")
        link = f"{path}.{key}" if path else key
        kind = type_of(child)
        if child.get("properties") or (child.get("items") or {}).get("properties"):
            kind = f"[{kind}](#{_anchor(link + ('[]' if child.get('type') == 'array' else ''))})"
        lines.append(f"| {name} | {kind} | {_cell(constraints(child))} | {_cell(describe(link, child))} |")
    return lines + [""]


def _anchor(path: str) -> str:
    """The heading anchor GitHub's Markdown gives ``## `path` ``: lowercased, punctuation dropped."""
    return "".join(c for c in path.lower() if c.isalnum() or c in "-_")


def render() -> str:
    """The whole page."""
    lines = [HEADER]
    for path, node in sections(schema(), ""):
        if path == "metadata":
            continue
        lines += section(path, node)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    """Print the page (redirect it into docs/api.md)."""
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
