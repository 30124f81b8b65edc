"""What ``validate``, ``plan`` and ``render`` print: tables for people, JSON and YAML for scripts.

``-o json`` and ``-o yaml`` print one report object (the shape is in the README's CLI table)::

    {"items": [{"source", "name", "namespace", "valid", "layout", "safetyRules", "warnings", "problems"}],
     "skipped": [...]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..layout import plan_roles
from ..render import Valid

FORMATS = ("table", "json", "yaml")


class _NoAliasDumper(yaml.SafeDumper):
    """A safe dumper that writes a repeated object out again instead of as an anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def yaml_stream(objects: Iterable[Any]) -> str:
    """Kubernetes objects as one YAML stream without anchors (``&id001``), so GitOps diffs stay readable."""
    return yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False, width=120)


RENDER_FORMATS = ("yaml", "json")


def object_list(objects: Iterable[Any]) -> str:
    """Kubernetes objects as kubectl's ``-o json`` prints several: one ``v1`` ``List`` with them as ``items``."""
    listed = {"apiVersion": "v1", "kind": "List", "items": list(objects), "metadata": {"resourceVersion": ""}}
    return json.dumps(listed, indent=4) + "\n"


@dataclass
class Checked:
    """One AscendInference document as validate sees it: valid (with its layout) or its problems."""

    source: str
    name: str
    namespace: str | None
    valid: Valid | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``source (name)``, the prefix of every line about this document."""
        return f"{self.source} ({self.name})"


def layout_fields(valid: Valid) -> dict[str, Any]:
    """The layout of a valid document as the report's ``layout`` object."""
    spec, layout = valid.obj.spec, valid.layout
    return {
        "engine": spec.engine.type,
        "chip": spec.hardware.chip,
        "tensor": layout.tensor,
        "pipeline": layout.pipeline,
        "data": layout.data,
        "podsPerReplica": layout.pods_per_replica,
        "npusPerPod": layout.npus_per_pod,
        "npusPerReplica": layout.npus_per_replica,
        "totalNpus": layout.total_npus,
        "summary": layout_summary(valid),
    }


def layout_summary(valid: Valid) -> str:
    """The layout in a line: the fleet's, or each role's of a two-role fleet."""
    roles = plan_roles(valid.obj.spec)
    if not roles:
        return valid.layout.summary()
    return "; ".join(f"{role}: {layout.summary()}" for role, layout in roles.items())


def safety_rules(valid: Valid) -> list[str]:
    """The built-in safety rules the control loop runs for this document beside its spec.rules, as text."""
    spec = valid.obj.spec
    return [rule.describe() for rule in spec.rules_in_force()[len(spec.rules) :]]


def report(results: list[Checked], skipped: list[str]) -> dict[str, Any]:
    """The machine-readable report of ``validate`` and ``plan``: one item per AscendInference document."""
    items = [
        {
            "source": r.source,
            "name": r.name,
            "namespace": r.namespace,
            "valid": r.valid is not None,
            "layout": layout_fields(r.valid) if r.valid is not None else None,
            "safetyRules": safety_rules(r.valid) if r.valid is not None else [],
            "warnings": r.warnings,
            "problems": r.problems,
        }
        for r in results
    ]
    return {"items": items, "skipped": skipped}


def structured(results: list[Checked], skipped: list[str], fmt: str) -> str:
    """The report as JSON or YAML text."""
    data = report(results, skipped)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, width=120)


PLAN_COLUMNS = (
    ("NAME", None),
    ("ENGINE", "engine"),
    ("CHIP", "chip"),
    ("TP", "tensor"),
    ("PP", "pipeline"),
    ("DP", "data"),
    ("PODS/REPLICA", "podsPerReplica"),
    ("NPUS/POD", "npusPerPod"),
    ("NPUS/REPLICA", "npusPerReplica"),
    ("TOTAL NPUS", "totalNpus"),
)


def plan_table(results: list[Checked]) -> str:
    """The layout table of the valid documents, then one summary line each (empty when none is valid)."""
    good = [r for r in results if r.valid is not None]
    if not good:
        return ""
    rows: list[tuple[object, ...]] = [tuple(title for title, _ in PLAN_COLUMNS)]
    for result in good:
        assert result.valid is not None  # filtered above; tells the type checker
        fields = layout_fields(result.valid)
        rows.append(tuple(result.name if key is None else fields[key] for _, key in PLAN_COLUMNS))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(PLAN_COLUMNS))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append("")
    lines += [f"{r.name}: {r.valid.layout.summary()}" for r in good if r.valid is not None]
    return "\n".join(lines) + "\n"


def validate_table(results: list[Checked]) -> str:
    """One ``is valid`` line per valid document, then one line per built-in safety rule it runs (the problems
    go to stderr)."""
    lines = []
    for r in results:
        if r.valid is None:
            continue
        lines.append(f"{r.source}: {r.name} is valid ({layout_summary(r.valid)})")
        lines += [
            f"  built-in safety rule: {text} (spec.safetyRules: false turns it off)"
            for text in safety_rules(r.valid)
        ]
    return "".join(line + "\n" for line in lines)
