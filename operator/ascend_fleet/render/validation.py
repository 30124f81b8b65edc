"""One check for a whole AscendInference document: schema, layout and engine arguments.

The CLI's ``validate`` and the operator's ``InvalidSpec`` condition both use it, so a user sees the
same messages offline and in the cluster.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from pydantic import ValidationError

from ..api import images
from ..api.catalog import unknown_metric_message
from ..api.checks import MAX_WINDOW_SECONDS, name_problem, precision_chip_problems, window_sentence
from ..api.v1alpha1 import AscendInference, AscendInferenceSpec
from ..api.variants import variant_spec, variant_warnings
from ..engines import engine_types
from ..layout import Layout, LayoutError, plan, plan_roles
from .agreement import Agreement, QueryParser, check_agreement, parse_here
from .children import compile_cache_problems, render_replica
from .disaggregation import disaggregation_problems, disaggregation_warnings
from .engine import arg_conflicts, exporter_runs, version_problems, version_warnings
from .metadata import Owner
from .template import pod_security_problems, schema_problems, template_problems


class InvalidSpec(ValueError):
    """Every problem found in one document, each a sentence that says what would fit."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Valid:
    """A document that passed every check."""

    obj: AscendInference
    layout: Layout
    warnings: list[str] = field(default_factory=list)


def validate(
    doc: dict,
    known_metrics: Collection[str] | None = None,
    max_window: float = MAX_WINDOW_SECONDS,
    allow_host_path: bool = False,
    parse_query: QueryParser = parse_here,
) -> Valid:
    """Parse and check one document, or raise InvalidSpec listing every problem.

    With ``known_metrics`` (the operator's metric catalog), a rule naming any other metric is a problem too;
    a rule whose window is longer than ``max_window`` seconds (the operator's control.maxWindow) is one as well.
    ``allow_host_path`` is the operator setting that lets ``model.volume`` be a hostPath. ``parse_query`` reads
    the rules' raw PromQL: the operator and the CLI pass the parser in a child process with limits.
    """
    problems = _check_kind(doc)
    problems += _check_name(doc.get("metadata") or {})
    try:
        obj = AscendInference.model_validate(doc)
    except ValidationError as error:
        raise InvalidSpec(problems + format_errors(error)) from None
    try:
        layout = plan(obj.spec)
        roles = plan_roles(obj.spec)
    except LayoutError as error:
        field = "spec.disaggregation" if obj.spec.disaggregation else "spec.parallelism"
        raise InvalidSpec([*problems, f"{field}: {error}"]) from None
    problems += disaggregation_problems(obj, roles)
    problems += image_problems(obj.spec)
    spec = obj.spec
    problems += precision_chip_problems(
        spec.precision, [v.precision for v in spec.variants], spec.hardware.chip
    )
    problems += arg_conflicts(obj.spec, layout)
    problems += version_problems(obj.spec, layout)
    problems += variant_version_problems(obj.spec, layout)
    problems += template_problems(obj.spec)
    problems += compile_cache_problems(obj.spec)
    if not problems:
        role = next(iter(roles), None)
        replica = render_replica(obj.spec, Owner(obj.name or "x", obj.namespace), 0, layout, role=role)
        pods = [o for o in replica if o["kind"] == "Pod"]
        if obj.spec.template is not None:
            problems += schema_problems(pods)
        problems += pod_security_problems(obj.spec, pods)
    if not allow_host_path and obj.spec.model.volume and "hostPath" in obj.spec.model.volume:
        problems.append(
            "spec.model.volume: hostPath volumes are off in this operator's configuration "
            "(allowHostPathModels: false), because they expose node files to anyone who may create an "
            "AscendInference; use a persistentVolumeClaim (or csi, image), or ask the platform team to allow it"
        )
    if known_metrics is not None:
        problems += unknown_metrics(obj, known_metrics)
    problems += long_windows(obj, max_window)
    agreement = check_agreement(obj, layout, parse_query) if not problems else Agreement()
    if problems or agreement.problems:
        raise InvalidSpec(problems + agreement.problems)
    return Valid(obj, layout, warnings=spec_warnings(obj.spec) + agreement.warnings)


def variant_version_problems(spec: AscendInferenceSpec, layout: Layout) -> list[str]:
    """A variant's precision that the engine image cannot run, in the words spec.precision gets, at its index."""
    found = []
    own = set(version_problems(spec, layout))
    for index, variant in enumerate(spec.variants):
        for problem in version_problems(variant_spec(spec, variant), layout):
            if problem not in own:  # the fleet's own precision problems are reported once, as they are
                found.append(problem.replace("spec.precision", f"spec.variants[{index}].precision", 1))
    return found


def image_problems(spec: AscendInferenceSpec) -> list[str]:
    """An engine x chip pair with no image: the engine does not support the chip upstream."""
    if spec.image() is not None:
        return []
    engine, chip = spec.engine.type, spec.hardware.chip
    supported = ", ".join(images.supported_chips(engine))
    others = [e for e in engine_types() if e != engine and chip in images.supported_chips(e)]
    alternative = f"use engine.type {others[0]} on {chip}, " if others else ""
    return [
        f"spec.hardware.chip: {engine} has no image for {chip} ({engine} supports {supported}); "
        f"{alternative}or run {engine} on a supported chip"
    ]


def spec_warnings(spec: AscendInferenceSpec) -> list[str]:
    """What renders but differs from what the spec asks for, as sentences for the user."""
    warnings = version_warnings(spec) + disaggregation_warnings(spec) + variant_warnings(spec)
    image = spec.image() or ""
    if spec.engine.exporter and not exporter_runs(spec):
        warnings.append(
            f"spec.engine.exporter: {image} is an upstream image without this project's exporter, so the "
            "pods run without it (no ascend_fleet_* metrics); point the operator's images setting (the chart's "
            "engineImages) at the project's engine images, or set engine.exporter: false"
        )
    return warnings


def unknown_metrics(obj: AscendInference, known: Collection[str]) -> list[str]:
    """One problem per rule whose ``metric`` is not in the operator's catalog."""
    return [
        f"spec.rules[{index}].metric: {unknown_metric_message(rule.metric, frozenset(known))}"
        for index, rule in enumerate(obj.spec.rules)
        if rule.metric is not None and rule.metric not in known
    ]


def long_windows(obj: AscendInference, max_window: float) -> list[str]:
    """One problem per rule whose window is longer than the operator allows."""
    return [
        f"spec.rules[{index}].for: {window_sentence(max_window)}"
        for index, rule in enumerate(obj.spec.rules)
        if rule.for_ > max_window
    ]


def _check_kind(doc: dict) -> list[str]:
    from ..api import names

    problems = []
    if doc.get("apiVersion") != names.API_VERSION:
        problems.append(f"apiVersion is {doc.get('apiVersion')!r}; it must be {names.API_VERSION!r}")
    if doc.get("kind") != names.KIND:
        problems.append(f"kind is {doc.get('kind')!r}; it must be {names.KIND!r}")
    return problems


def _check_name(metadata: dict) -> list[str]:
    name = metadata.get("name")
    if not name:
        return ["metadata.name is missing"]
    problem = name_problem(str(name))
    return [problem] if problem else []


def format_errors(error: ValidationError) -> list[str]:
    """Pydantic errors as ``spec.field.path: message`` lines, in wire (camelCase) names."""
    lines = []
    for item in error.errors():
        # A key with a line break or a control character is quoted, so that every problem stays one line.
        path = ".".join(
            str(part) if str(part).isprintable() else repr(part)
            for part in item["loc"]
            if not _is_internal(part)
        )
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field (check its spelling; see `kubectl explain ainf.spec`)"
        elif item["type"] == "missing":
            message = "required field is missing"
        lines.append(f"{path}: {message}" if path else message)
    return lines


def _is_internal(part: object) -> bool:
    # pydantic puts validator names ("function-after[...]") and union branches in locations
    return isinstance(part, str) and ("[" in part or part in {"float", "str", "int"})
