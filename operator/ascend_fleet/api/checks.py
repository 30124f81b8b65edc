"""Cross-field checks stated twice, once in Python and once as the CRD's CEL, with one sentence each.

The operator (``ascend-fleet validate`` and the ``InvalidSpec`` condition) runs the Python side; the API
server runs the CEL side at ``kubectl apply``. Each check's sentence is built by a Python function and by
a CEL ``messageExpression`` from the same template, so a user reads the same words in both places (a
test compares them on a corpus of bad objects, with cel-python and on a real API server).

CEL sees the object as stored: after the CRD's defaults, without pydantic's. The expressions below
therefore spell out the defaults the CRD does not declare (``hardware.chip``, ``hardware.npusPerNode``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..engines.registry import builtin_facts, engine_types, facts_of
from .units import format_duration

# ----- chips -----

CHIP_LABEL = {"ascend910a": "Ascend 910A", "ascend910b": "Ascend 910B", "ascend910_93": "Ascend A3 (910_93)"}
DEFAULT_CHIP = "ascend910b"
DEFAULT_NPUS_PER_NODE: dict[str, int] = {"ascend910a": 8, "ascend910b": 8, "ascend910_93": 16}
MAX_NPUS_PER_NODE = 64
MAX_MODEL_DIMENSION = 4096  # attention heads, layers: bounded so the CEL sentences can print them

# NPU counts one pod may request, per chip (device plugin rules): 910A powers of two, 910B 1..8, A3 1 or even.
ALLOWED_NPUS_PER_POD: dict[str, tuple[int, ...]] = {
    "ascend910a": (1, 2, 4, 8),
    "ascend910b": tuple(range(1, 9)),
    "ascend910_93": (1, *range(2, 17, 2)),
}


# Precisions each chip computes. The 910A (Da Vinci, first generation) has fp16 and int8 cube units but no
# bfloat16 arithmetic, which came with the 910B; A2 and A3 run all three.
PRECISIONS = ("bf16", "fp16", "int8")
CHIP_PRECISIONS: dict[str, tuple[str, ...]] = {
    "ascend910a": ("fp16", "int8"),
    "ascend910b": PRECISIONS,
    "ascend910_93": PRECISIONS,
}
DEFAULT_PRECISION = "bf16"


def allowed_counts(chip: str, npus_per_node: int) -> tuple[int, ...]:
    """NPU counts a single pod may request on this chip, capped by the node's size."""
    return tuple(n for n in ALLOWED_NPUS_PER_POD[chip] if n <= npus_per_node)


def join(values: Iterable[object], sep: str = ", ") -> str:
    """Numbers in a sentence: ``1, 2, 4, 8`` (the CEL side joins the same way)."""
    return sep.join(str(v) for v in values)


def divisors(n: int, limit: int = MAX_NPUS_PER_NODE) -> list[int]:
    """Divisors of ``n`` up to ``limit``: the tensor sizes that split ``n`` evenly."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


# ----- sentences (Python side) -----


def engine_chip_problem(engine: str, chip: str) -> str | None:
    """Why this engine cannot run on this chip, or None when it can."""
    if chip in facts_of(engine).chips:
        return None
    return engine_chip_sentence(engine, chip)


def engine_chip_sentence(engine: str, chip: str) -> str:
    """The engine's chips, and the other engines that do run on this chip."""
    facts = facts_of(engine)
    fits = " or ".join(facts.chips)
    others = [e for e in engine_types() if e != engine and chip in facts_of(e).chips]
    alternative = "".join(f", or use engine.type {other}" for other in others)
    return (
        f"engine.type {engine} does not run on hardware.chip {chip}: {facts.chip_support}; "
        f"set hardware.chip to {fits}{alternative}"
    )


def precision_chip_sentence(precision: str, chip: str) -> str:
    """Why a precision (spec.precision or a variant's) cannot run on this chip, and what would."""
    runs = CHIP_PRECISIONS[chip]
    elsewhere = [c for c, precisions in CHIP_PRECISIONS.items() if precision in precisions]
    return (
        f"precision {precision} does not run on hardware.chip {chip}: the {CHIP_LABEL[chip]} computes "
        f"{' and '.join(runs)} only; set precision {' or '.join(runs)} (in spec.precision and each of "
        f"spec.variants), or hardware.chip {' or '.join(elsewhere)}"
    )


def precision_chip_problems(precision: str, variants: Iterable[str], chip: str) -> list[str]:
    """One problem per precision the chip cannot run: spec.precision, then each variant's, at its field."""
    runs = CHIP_PRECISIONS[chip]
    fields = [("spec.precision", precision)] + [
        (f"spec.variants[{index}].precision", variant) for index, variant in enumerate(variants)
    ]
    return [
        f"{field}: {precision_chip_sentence(value, chip)}" for field, value in fields if value not in runs
    ]


MAX_NAME_LENGTH = 52  # a pod's hostname "<name>-<replica>-<rank>" must stay a 63-character DNS label
DNS_1035 = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DNS_1035 = re.compile(DNS_1035)


def name_problem(name: str) -> str | None:
    """Why ``metadata.name`` cannot name an AscendInference, or None when it can."""
    if _DNS_1035.match(name) and len(name) <= MAX_NAME_LENGTH:
        return None
    return (
        f"metadata.name '{name}' must be a DNS label of at most {MAX_NAME_LENGTH} characters (lower-case "
        "letters, digits and '-', starting with a letter), because pod and Service names derive from it"
    )


# The CRD's bound on a rule's `for`; the operator's control.maxWindow may lower it.
MAX_WINDOW_SECONDS = 86400.0
MAX_DURATION_LENGTH = 32


def window_sentence(limit_seconds: float = MAX_WINDOW_SECONDS) -> str:
    """Why a rule's window is too long."""
    return (
        f"for must be at most {format_duration(limit_seconds)}: Prometheus evaluates a rule over every sample "
        "of its window, for every object, so a longer window costs it memory; write e.g. 5m or 2h"
    )


# A window's grammar, narrower than DURATION_PATTERN: each number short enough for its unit that no sum of parts
# within MAX_DURATION_LENGTH characters overflows a 64-bit count of nanoseconds, so the CEL rule below never
# fails with an error instead of the sentence. It is the node's OpenAPI pattern rather than a matches() in the
# rule: the API server's cost estimator sizes an int-or-string node at the largest request (3 MiB) whatever its
# maxLength, and charges every string function on it by that size (docs/decisions.md, "The chart's kubeVersion").
WINDOW_PATTERN = r"^([0-9]{1,5}(\.[0-9]+)?h|[0-9]{1,7}(\.[0-9]+)?(min|m)|[0-9]{1,9}(\.[0-9]+)?s|[0-9]{1,12}(\.[0-9]+)?ms)+$"


def window_validations() -> list[dict]:
    """CEL for a rule's ``for`` (an int-or-string node): at most MAX_WINDOW_SECONDS. One replace() is the only
    string function, and ``type(self) in [int]`` tests the branch: 1.30's estimator charges ``type(self) == int``
    by the node's size, as it does a string function."""
    limit = int(MAX_WINDOW_SECONDS)
    return [
        {
            "rule": f"type(self) in [int] ? self <= {limit} : "
            f"duration(self.replace('min', 'm')) <= duration('{limit}s')",
            "message": window_sentence(),
        }
    ]


def neighbours(values: Iterable[int], value: int) -> list[int]:
    """The largest of ``values`` below ``value`` and the smallest above it (those that exist)."""
    values = sorted(values)
    return [n for n in values if n < value][-1:] + [n for n in values if n > value][:1]


def heads_sentence(tensor: int, heads: int) -> str:
    fits = neighbours(divisors(heads), tensor)
    return f"tensor {tensor} does not divide the model's {heads} attention heads; use tensor {join(fits, ' or ')}"


def layers_sentence(pipeline: int, layers: int) -> str:
    return f"pipeline {pipeline} has more stages than the model's {layers} layers; use at most {layers}"


def single_pod_sentence(tensor: int, pipeline: int, chip: str, per_node: int) -> str:
    count, allowed = tensor * pipeline, allowed_counts(chip, per_node)
    choices = neighbours(allowed, count)
    return (
        f"tensor {tensor} x pipeline {pipeline} = {count} NPUs per pod, but {CHIP_LABEL[chip]} pods take "
        f"{join(allowed)} NPUs; pick tensor x pipeline = {join(choices, ' or ')}"
    )


def tensor_too_large_sentence(tensor: int, per_node: int) -> str:
    return (
        f"tensor {tensor} is larger than a node ({per_node} NPUs) and tensor parallelism never crosses a node; "
        f"use tensor {per_node} and raise pipeline to keep the NPU count"
    )


def tensor_divides_node_sentence(tensor: int, pipeline: int, per_node: int) -> str:
    return (
        f"a replica of {tensor * pipeline} NPUs spans several {per_node}-NPU nodes, so each pod takes a whole "
        f"node and tensor must divide {per_node}; tensor {tensor} does not (use one of {join(divisors(per_node))})"
    )


def whole_node_sentence(chip: str, per_node: int) -> str:
    return (
        f"a replica spanning nodes takes whole nodes, but {CHIP_LABEL[chip]} pods cannot request {per_node} NPUs; "
        f"set hardware.npusPerNode to one of {join(ALLOWED_NPUS_PER_POD[chip])}"
    )


def stages_sentence(tensor: int, pipeline: int, per_node: int) -> str:
    stages = per_node // tensor
    lower = pipeline - pipeline % stages
    options = [p for p in (lower, lower + stages) if p > 0]
    return (
        f"tensor {tensor} x pipeline {pipeline} = {tensor * pipeline} NPUs spans nodes; each {per_node}-NPU pod "
        f"holds {stages} pipeline stages of tensor {tensor}, so pipeline must be a multiple of {stages}: "
        f"try pipeline {join(options, ' or ')}"
    )


# ----- the same checks as CEL (API server side) -----


def _cel_list(values: Iterable[object]) -> str:
    return "[" + ", ".join(_cel_value(v) for v in values) + "]"


def _cel_value(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, tuple | list):
        return _cel_list(value)
    return str(value)


def _cel_map(table: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{_cel_value(k)}: {_cel_value(v)}" for k, v in table.items()) + "}"


def _cel_by_chip(table: Mapping[str, object]) -> str:
    """A value per chip as nested conditionals: a map literal of lists would lose the lists' size bound,
    which the API server's cost estimator needs."""
    *first, (_, last) = table.items()
    return (
        "("
        + "".join(f"{CHIP} == '{chip}' ? {_cel_value(v)} : " for chip, v in first)
        + _cel_value(last)
        + ")"
    )


# The API server's cost estimator gives ``string(int)`` and ``list.join()`` results no size bound and refuses
# rules that use them in a message. The sentences below therefore print numbers digit by digit from a literal
# list, and lists of numbers by looking the finished text up in a literal table.
_DIGITS = _cel_list([str(d) for d in range(10)])


def _s(expr: str, digits: int = 4) -> str:
    """CEL for the decimal text of a number ``0 <= expr < 10**digits``."""
    parts = [f"({expr} >= {10**k} ? {_DIGITS}[{expr} / {10**k} % 10] : '')" for k in range(digits - 1, 0, -1)]
    return "(" + " + ".join([*parts, f"{_DIGITS}[{expr} % 10]"]) + ")"


def _or(first: str, second: str, second_exists: str) -> str:
    """``first`` or ``first or second``: two numbers, the second only where it exists."""
    return f"{_s(first)} + ({second_exists} ? ' or ' + {_s(second)} : '')"


# At the spec node: what pydantic would fill in where the CRD declares no default.
CHIP = f"(has(self.hardware) && has(self.hardware.chip) ? self.hardware.chip : '{DEFAULT_CHIP}')"
NODE = (
    f"(has(self.hardware) && has(self.hardware.npusPerNode) ? self.hardware.npusPerNode : "
    f"{_cel_map(DEFAULT_NPUS_PER_NODE)}[{CHIP}])"
)
ENGINE_TYPE = "self.engine.type"  # required by the schema, so no default to spell out
TENSOR, PIPELINE = "self.parallelism.tensor", "self.parallelism.pipeline"  # the CRD defaults both
COUNT = f"({TENSOR} * {PIPELINE})"
HEADS, LAYERS = "self.model.numAttentionHeads", "self.model.numLayers"
LABEL = f"{_cel_map(CHIP_LABEL)}[{CHIP}]"
ALLOWED = _cel_by_chip(ALLOWED_NPUS_PER_POD)
ALLOWED_ON_NODE = f"{ALLOWED}.filter(n, n <= {NODE})"
# The text of the allowed counts on a node, by chip and by how many of the chip's counts fit the node.
_ALLOWED_TEXT = {
    chip: [join(counts[:k]) for k in range(len(counts) + 1)] for chip, counts in ALLOWED_NPUS_PER_POD.items()
}
ALLOWED_ON_NODE_TEXT = f"{_cel_by_chip(_ALLOWED_TEXT)}[size({ALLOWED_ON_NODE})]"
ALLOWED_TEXT = f"{_cel_map({chip: join(counts) for chip, counts in ALLOWED_NPUS_PER_POD.items()})}[{CHIP}]"
NODE_DIVISORS_TEXT = f"{_cel_list([join(divisors(n)) for n in range(MAX_NPUS_PER_NODE + 1)])}[{NODE}]"
UP_TO_64 = _cel_list(range(1, MAX_NPUS_PER_NODE + 1))


def _below(values: str, value: str) -> str:
    """The largest of a CEL list below ``value`` (one exists in every use here)."""
    return f"{values}.filter(n, n < {value} && !{values}.exists(m, m > n && m < {value}))[0]"


def _above(values: str, value: str) -> tuple[str, str]:
    """The smallest of a CEL list above ``value``, and whether there is one."""
    return f"{values}.filter(n, n > {value} && !{values}.exists(m, m < n && m > {value}))[0]", (
        f"{values}.exists(n, n > {value})"
    )


_HEAD_DIVISORS = f"{UP_TO_64}.filter(d, {HEADS} % d == 0)"
_STAGES = f"({NODE} / {TENSOR})"
_LOWER = f"({PIPELINE} - {PIPELINE} % {_STAGES})"

# Each layout check: (when it fails, its sentence), in the planner's order. The planner stops at the
# first failure, so each CEL rule holds whenever an earlier check already failed: one sentence, as in Python.
LAYOUT_CHECKS: list[tuple[str, str]] = [
    (
        f"has(self.model.numAttentionHeads) && {HEADS} % {TENSOR} != 0",
        f"'tensor ' + {_s(TENSOR)} + ' does not divide the model\\'s ' + {_s(HEADS)} + ' attention heads; "
        f"use tensor ' + {_or(_below(_HEAD_DIVISORS, TENSOR), *_above(_HEAD_DIVISORS, TENSOR))}",
    ),
    (
        f"has(self.model.numLayers) && {LAYERS} < {PIPELINE}",
        f"'pipeline ' + {_s(PIPELINE)} + ' has more stages than the model\\'s ' + {_s(LAYERS)} + "
        f"' layers; use at most ' + {_s(LAYERS)}",
    ),
    (
        f"{COUNT} <= {NODE} && !({COUNT} in {ALLOWED_ON_NODE})",
        f"'tensor ' + {_s(TENSOR)} + ' x pipeline ' + {_s(PIPELINE)} + ' = ' + {_s(COUNT)} + ' NPUs per pod, but ' "
        f"+ {LABEL} + ' pods take ' + {ALLOWED_ON_NODE_TEXT} + ' NPUs; pick tensor x pipeline = ' + "
        f"{_or(_below(ALLOWED_ON_NODE, COUNT), *_above(ALLOWED_ON_NODE, COUNT))}",
    ),
    (
        f"{COUNT} > {NODE} && {TENSOR} > {NODE}",
        f"'tensor ' + {_s(TENSOR)} + ' is larger than a node (' + {_s(NODE)} + ' NPUs) and tensor parallelism "
        f"never crosses a node; use tensor ' + {_s(NODE)} + ' and raise pipeline to keep the NPU count'",
    ),
    (
        f"{COUNT} > {NODE} && {NODE} % {TENSOR} != 0",
        f"'a replica of ' + {_s(COUNT)} + ' NPUs spans several ' + {_s(NODE)} + '-NPU nodes, so each pod takes a "
        f"whole node and tensor must divide ' + {_s(NODE)} + '; tensor ' + {_s(TENSOR)} + ' does not (use one of ' "
        f"+ {NODE_DIVISORS_TEXT} + ')'",
    ),
    (
        f"{COUNT} > {NODE} && !({NODE} in {ALLOWED})",
        f"'a replica spanning nodes takes whole nodes, but ' + {LABEL} + ' pods cannot request ' + {_s(NODE)} + "
        f"' NPUs; set hardware.npusPerNode to one of ' + {ALLOWED_TEXT}",
    ),
    (
        f"{COUNT} > {NODE} && {PIPELINE} % {_STAGES} != 0",
        f"'tensor ' + {_s(TENSOR)} + ' x pipeline ' + {_s(PIPELINE)} + ' = ' + {_s(COUNT)} + ' NPUs spans nodes; "
        f"each ' + {_s(NODE)} + '-NPU pod holds ' + {_s(_STAGES)} + ' pipeline stages of tensor ' + {_s(TENSOR)} "
        f"+ ', so pipeline must be a multiple of ' + {_s(_STAGES)} + ': try pipeline ' + "
        f"({_LOWER} > 0 ? {_s(_LOWER)} + ' or ' : '') + {_s(f'({_LOWER} + {_STAGES})')}",
    ),
]


def spec_validations() -> list[dict]:
    """The spec node's CEL rules: the parallel layout (reported at spec.parallelism) and engine x chip."""
    rules = []
    for index, (fails, message) in enumerate(LAYOUT_CHECKS):
        earlier = [f"({condition})" for condition, _ in LAYOUT_CHECKS[:index]]
        rules.append(
            {
                "rule": " || ".join([*earlier, f"!({fails})"]),
                "messageExpression": message,
                "fieldPath": ".parallelism",
            }
        )
    unsupported = [
        (facts.type, chip) for facts in builtin_facts() for chip in CHIP_LABEL if chip not in facts.chips
    ]
    for engine, chip in unsupported:
        rules.append(
            {
                "rule": f"!({ENGINE_TYPE} == '{engine}' && {CHIP} == '{chip}')",
                "message": engine_chip_sentence(engine, chip),
                "fieldPath": ".hardware.chip",
            }
        )
    return rules + precision_validations()


PRECISION = f"(has(self.precision) ? self.precision : '{DEFAULT_PRECISION}')"


def precision_validations() -> list[dict]:
    """A precision the chip cannot compute, in spec.precision or a variant: one rule per chip and precision."""
    rules = []
    for chip, runs in CHIP_PRECISIONS.items():
        for precision in (p for p in PRECISIONS if p not in runs):
            on_chip = f"{CHIP} == '{chip}'"
            rules.append(
                {
                    "rule": f"!({on_chip} && {PRECISION} == '{precision}')",
                    "message": precision_chip_sentence(precision, chip),
                    "fieldPath": ".precision",
                }
            )
            rules.append(
                {
                    "rule": f"!({on_chip} && has(self.variants) && "
                    f"self.variants.exists(v, v.precision == '{precision}'))",
                    "message": precision_chip_sentence(precision, chip),
                    "fieldPath": ".variants",
                }
            )
    return rules


def root_validations() -> list[dict]:
    """The object root's CEL rules: ``metadata.name`` as a short DNS-1035 label."""
    return [
        {
            "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{DNS_1035}')",
            "messageExpression": f"'metadata.name \\'' + self.metadata.name + '\\' must be a DNS label of at most "
            f"{MAX_NAME_LENGTH} characters (lower-case letters, digits and \\'-\\', starting with a letter), because "
            "pod and Service names derive from it'",
        }
    ]
