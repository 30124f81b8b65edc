"""The building blocks of the AscendInference types: the base model, durations, thresholds and enumerations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from ..engines.registry import BUILTIN_TYPES, engine_types
from .actions import ACTION_NAMES
from .checks import MAX_DURATION_LENGTH, WINDOW_PATTERN, window_validations
from .units import (
    DURATION_PATTERN,
    RULE_THRESHOLD_PATTERN,
    STEP_PATTERN,
    format_duration,
    parse_duration,
    parse_rule_threshold,
    parse_step,
)

_DURATION_SCHEMA = {
    "x-kubernetes-int-or-string": True,
    "pattern": DURATION_PATTERN,
    "maxLength": MAX_DURATION_LENGTH,
    "description": "A duration: 30s, 5m, 5min, 1h, 1h30m, or a number of seconds.",
}

Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(_DURATION_SCHEMA),
]
"""Seconds, written as ``30s``, ``5m``, ``5min``, ``1h`` or a number of seconds."""

Window = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {**_DURATION_SCHEMA, "pattern": WINDOW_PATTERN, "x-kubernetes-validations": window_validations()}
    ),
]
"""A rule's window: a Duration of at most ``MAX_WINDOW_SECONDS`` (the CRD says so too)."""


def _bounded_threshold(value: object) -> float:
    if isinstance(value, str) and len(value) > MAX_DURATION_LENGTH:
        raise ValueError(
            f"{len(value)} characters, over the {MAX_DURATION_LENGTH} a threshold may have; write e.g. 0.85, "
            "'85%' or 500ms"
        )
    return parse_rule_threshold(value)


Threshold = Annotated[
    float,
    BeforeValidator(_bounded_threshold),
    # A number or a string: no structural type covers both, and the API server compiles no CEL on an
    # untyped node, so OpenAPI value checks do the work (pattern and maxLength apply to strings, minimum to
    # numbers). Whether a duration fits the rule's metric is the model's check (policy.Rule).
    WithJsonSchema(
        {
            "x-kubernetes-preserve-unknown-fields": True,
            "description": 'A number such as 0.85 or 12, a percentage string such as "85%", or for a latency '
            "metric a duration such as 1s or 500ms (seconds).",
            "pattern": RULE_THRESHOLD_PATTERN,
            "maxLength": MAX_DURATION_LENGTH,
            "minimum": 0,
        }
    ),
]
"""A plain number; percentages are converted to ratios (``"85%"`` -> 0.85), durations to seconds (``500ms``
-> 0.5)."""

Step = Annotated[
    int,
    BeforeValidator(parse_step),
    PlainSerializer(lambda value: value, return_type=int),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "pattern": STEP_PATTERN,
            "maxLength": MAX_DURATION_LENGTH,
            "minimum": 1,
            "maximum": 100,
            "description": 'Whole percents: a number from 1 to 100, or a percentage such as "25%" (a '
            'fraction rounds up: "12.5%" is 13).',
        }
    ),
]
"""Whole percents, written ``25`` or ``"25%"``."""

MultiNode = Literal["ray", "native"]
Chip = Literal["ascend910a", "ascend910b", "ascend910_93"]
Precision = Literal["bf16", "fp16", "int8"]
if TYPE_CHECKING:
    Action = str  # one of ACTION_NAMES: a type checker cannot read a literal built from a table
else:
    Action = Literal[ACTION_NAMES]
Comparison = Literal[">", ">=", "<", "<="]
RoutingMode = Literal["service", "inferencePool"]
SchedulingPolicy = Literal["fcfs", "short-request-first"]


def _registered_engine(value: str) -> str:
    """An engine type some engine is registered for; the sentence lists them as pydantic lists a literal's."""
    known = engine_types()
    if value in known:
        return value
    quoted = [repr(t) for t in known]
    expected = " or ".join([", ".join(quoted[:-1]), quoted[-1]]) if len(quoted) > 1 else quoted[0]
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


RegisteredEngineType = Annotated[
    str,
    AfterValidator(_registered_engine),
    # The CRD lists the production engines; an engine registered at run time is known to the operator only.
    WithJsonSchema({"enum": list(BUILTIN_TYPES), "type": "string"}),
]
"""An ``engines.EngineType``, or the type of an engine registered at run time."""


class Model(BaseModel):
    """Base for every API type: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, defaults included."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


def cel_or_default(field: str, default: object) -> str:
    """CEL for a field's value with the default pydantic would fill in (CEL sees only what was written)."""
    return f"(has(self.{field}) ? self.{field} : {default})"
