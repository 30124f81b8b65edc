"""How a fleet is reached and changed.

Request scheduling and priority classes, routing, autoscaling, the control loop's rules and disruption.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import JsonDict

from .actions import ACTION_LIST, ACTIONS, VARIANT_ACTIONS, Scope, action_kind, variant_sentence
from .bounds import (
    MAX_DNS_LABEL_LENGTH,
    MAX_DNS_SUBDOMAIN_LENGTH,
    MAX_LABEL_VALUE_LENGTH,
    MAX_METRIC_LENGTH,
    MAX_NODE_SELECTOR,
    MAX_QUERY_LENGTH,
    MAX_RULE_NAME_LENGTH,
)
from .catalog import NPU_UNHEALTHY, format_value, threshold_unit_problem
from .checks import MAX_WINDOW_SECONDS, window_sentence
from .fields import (
    Action,
    Comparison,
    Duration,
    Model,
    RoutingMode,
    SchedulingPolicy,
    Step,
    Threshold,
    Window,
    cel_or_default,
)
from .k8s import Toleration
from .units import format_duration


class Scheduling(Model):
    """Request scheduling in the engine and pod placement in the cluster."""

    priority: bool = Field(
        default=False, description="Priority request scheduling (requests carry `priority`)."
    )
    policy: SchedulingPolicy = Field(
        default="fcfs",
        description="Order of the engine's own queue: fcfs, or short-request-first (vllm-ascend only: prompts "
        "up to shortRequestTokens go first, a longer one waiting over maxWait goes before them).",
    )
    short_request_tokens: int = Field(
        default=512,
        ge=1,
        le=1_000_000,
        description="Prompt tokens up to which short-request-first counts a request as short.",
    )
    max_wait: Duration = Field(
        default=2.0, description="How long short-request-first lets a long prompt wait before it goes first."
    )
    node_selector: dict[str, Annotated[str, Field(max_length=MAX_LABEL_VALUE_LENGTH)]] = Field(
        default_factory=dict,
        max_length=MAX_NODE_SELECTOR,
        description="Node labels every engine pod requires (the pod's nodeSelector).",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=64,
        description="Taints the engine pods tolerate (the pod's tolerations).",
    )
    scheduler_name: str | None = Field(
        default=None, max_length=MAX_DNS_SUBDOMAIN_LENGTH, description="e.g. volcano."
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=MAX_DNS_SUBDOMAIN_LENGTH,
        description="PriorityClass of the engine pods (preemption order under pressure).",
    )


class PriorityClass(Model):
    """One class of requests: an InferenceObjective with its priority, and its queue at the endpoint picker."""

    name: str = Field(
        min_length=1,
        max_length=40,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Class name; clients name the class's InferenceObjective <inference>-<name> in the "
        "x-gateway-inference-objective header.",
    )
    priority: int = Field(
        ge=-1000,
        le=1000,
        description="Dispatch priority at the endpoint picker: higher first; negative only for a sheddable class.",
    )
    max_queue: int = Field(
        default=64,
        ge=1,
        le=100_000,
        description="Requests of this class the picker queues (its band's maxRequests).",
    )
    sheddable: bool = Field(
        default=False, description="Shed under saturation (the picker drops negative priorities first)."
    )
    min_prompt_tokens: int = Field(
        default=0,
        ge=0,
        description="Requests whose prompt has at least this many tokens belong to this class (the class with "
        "the largest minPromptTokens that the prompt reaches).",
    )

    @model_validator(mode="after")
    def _sheddable_is_negative(self) -> PriorityClass:
        if self.sheddable != (self.priority < 0):
            raise ValueError(
                f"class {self.name!r}: a sheddable class needs a negative priority and a negative priority "
                f"makes a class sheddable (the endpoint picker sheds negative priorities); got priority "
                f"{self.priority} with sheddable {str(self.sheddable).lower()}"
            )
        return self


def default_classes() -> list[PriorityClass]:
    """The seeds' three classes by prompt length: over 2048 tokens, over 512, the rest (queues 16, 32, 64).

    Short prompts are dispatched first, so long prompts stop holding them up (the seed's code ran long ones
    first; bench/routing measured both orders without a winner, docs/routing.md).
    """
    return [
        PriorityClass(name="long", priority=0, max_queue=16, min_prompt_tokens=2049),
        PriorityClass(name="medium", priority=1, max_queue=32, min_prompt_tokens=513),
        PriorityClass(name="short", priority=2, max_queue=64, min_prompt_tokens=0),
    ]


class GatewayRef(Model):
    """The Gateway an HTTPRoute attaches the InferencePool to."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Gateway (in this namespace).")
    namespace: str | None = Field(
        default=None, max_length=MAX_DNS_LABEL_LENGTH, description="Default: the inference's namespace."
    )
    section_name: str | None = Field(
        default=None, max_length=MAX_DNS_SUBDOMAIN_LENGTH, description="A listener of the Gateway."
    )


class PickerSpec(Model):
    """The endpoint picker's Deployment (inferencePool mode)."""

    replicas: int = Field(
        default=2,
        ge=1,
        le=5,
        description="Picker pods. More than one: all of them serve (each reads the pool and the engines' "
        "metrics itself), so the death of one fails only the requests in flight through it; with "
        "leaderElection, only the leader serves and the others stand by.",
    )
    leader_election: bool = Field(
        default=False,
        description="With more than one replica: elect a leader through a Lease, and only the leader serves "
        "(one prefix-cache index and one set of flow-control queues for the whole pool). A standby reads "
        "nothing until it leads, so the leader's death stops routing for up to the Lease's 15 s. Off: every "
        "replica serves.",
    )
    failure_mode: Literal["FailClose", "FailOpen"] = Field(
        default="FailClose",
        description="What the gateway does when no picker answers: FailClose refuses the request, FailOpen "
        "sends it to a serving leader of its own choice (no priority classes, no load awareness). Envoy fails "
        "open only in its BUFFERED body mode, not the FULL_DUPLEX_STREAMED mode the upstream picker needs: "
        "run several serving pickers rather than count on FailOpen.",
    )
    fallbacks: int = Field(
        default=0,
        ge=0,
        le=4,
        description="Endpoints the picker names after the best one, in order, for the gateway to retry on when "
        "the first refuses the connection or fails before answering (the endpoint picker protocol's fallbacks): "
        "a dead engine then costs a retry instead of a failed request. Needs a Gateway that implements the "
        "fallbacks (Envoy's override_host policy); one that reads a single address fails on the list.",
    )


class Routing(Model):
    """How requests reach the serving leaders."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.classes) || self.classes.all(c, self.classes.exists_one(d, d.priority == c.priority))",
                    "message": "each priority class needs its own priority (one priority band per class)",
                }
            ]
        }
    )

    mode: RoutingMode = Field(
        default="service",
        description="service: a ClusterIP Service over the serving leaders. inferencePool: a Gateway API "
        "InferencePool with the endpoint picker and one InferenceObjective per class.",
    )
    classes: list[PriorityClass] = Field(
        default_factory=default_classes,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Priority classes (inferencePool mode); default: long (> 2048 prompt tokens, priority 0, "
        "queue 16), medium (> 512, 1, 32), short (2, 64).",
    )
    gateway: GatewayRef | None = Field(
        default=None,
        description="Attach the InferencePool to this Gateway with an HTTPRoute (inferencePool mode).",
    )
    picker: PickerSpec = Field(
        default_factory=PickerSpec,
        description="The endpoint picker's replicas and failure mode (inferencePool mode).",
    )

    @model_validator(mode="after")
    def _distinct(self) -> Routing:
        problems = []
        for field_name in ("name", "priority"):
            values = [getattr(c, field_name) for c in self.classes]
            repeated = sorted({str(v) for v in values if values.count(v) > 1})
            if repeated:
                problems.append(f"class {field_name}s must be distinct, repeated: {', '.join(repeated)}")
        if problems:
            raise ValueError(
                "; ".join(problems) + " (one InferenceObjective and one priority band per class)"
            )
        return self

    def class_for(self, prompt_tokens: int) -> PriorityClass | None:
        """The class of a request with this many prompt tokens: the largest ``minPromptTokens`` it reaches."""
        fitting = [c for c in self.classes if prompt_tokens >= c.min_prompt_tokens]
        return max(fitting, key=lambda c: c.min_prompt_tokens) if fitting else None


# The CEL twin of a bounds model's min <= max check (the fleet's and each P/D role's), defaults as in pydantic.
REPLICA_BOUNDS_RULE: JsonDict = {
    "rule": f"{cel_or_default('minReplicas', 1)} <= {cel_or_default('maxReplicas', 8)}",
    "message": "minReplicas must be <= maxReplicas (defaults 1 and 8)",
}


class Autoscaling(Model):
    """Bounds and pacing for the control loop's scale and restart actions."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [REPLICA_BOUNDS_RULE]})

    min_replicas: int = Field(default=1, ge=0, description="Fewest replicas a rule may scale down to.")
    max_replicas: int = Field(default=8, ge=1, description="Most replicas a rule may scale up to.")
    scale_up_cooldown: Duration = Field(default=180.0, description="Quiet time after a scale-up.")
    scale_down_cooldown: Duration = Field(default=600.0, description="Quiet time after a scale-down.")
    restart_cooldown: Duration = Field(
        default=600.0, description="Quiet time between rule restarts of one replica."
    )
    shift_cooldown: Duration = Field(
        default=120.0,
        description="Quiet time after a shift_traffic in either direction, so that a rule and the rule back "
        "cannot flap faster than the metric shows the effect.",
    )
    dry_run: bool = Field(default=False, description="Record decisions without acting on them.")

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"autoscaling.minReplicas ({self.min_replicas}) is above maxReplicas ({self.max_replicas}); "
                "make minReplicas <= maxReplicas"
            )
        return self


DEFAULT_SCOPE: dict[str, str] = {kind.name: kind.scope for kind in ACTIONS}
# An action bound to one scope refuses every other, in the CRD (CEL) as in the model.
_SCOPE_RULES: list[JsonDict] = [
    {
        "rule": f"self.action != '{kind.name}' || !has(self.scope) || self.scope == '{kind.scope}'",
        "message": kind.scope_sentence(),
    }
    for kind in ACTIONS
    if kind.scope_only
]
# The roles of a two-role fleet (spec.disaggregation), which a rule may read and act on one of.
Role = Literal["prefill", "decode"]
# Only the actions that move traffic to a variant take ``to``, and they need it.
_VARIANT_RULE: JsonDict = {
    "rule": "(" + " || ".join(f"self.action == '{name}'" for name in VARIANT_ACTIONS) + ") == has(self.to)",
    "message": variant_sentence(),
}


# The text form of a rule, as ``Rule.describe`` writes it: ``<metric> <comparison> <threshold> for <window> ->
# <action> [<role>]``.
_RULE_TEXT = re.compile(
    r"\s*(?P<metric>[a-z0-9_]+)\s*(?P<comparison>>=|<=|>|<)\s*(?P<threshold>[0-9.]+%?[a-z]*)\s+for\s+"
    r"(?P<window>[0-9]+[smhd])\s*->\s*(?P<action>[a-z_]+)(?:\s+(?P<role>prefill|decode))?\s*"
)
# Text longer than any rule is not echoed back whole.
_TEXT_SHOWN = 80


def text_rule_sentence(text: str) -> str:
    """Why a rule written as text is refused, with the object it reads as when it follows the text form."""
    found = _RULE_TEXT.fullmatch(text[: _TEXT_SHOWN * 2])
    if found is None:
        shown = text if len(text) <= _TEXT_SHOWN else text[:_TEXT_SHOWN] + "..."
        return (
            f"a rule is an object, not the text {shown!r}: write it as {{metric: npu_utilization, "
            "threshold: 85%, for: 5m, action: scale_up}"
        )
    parts = [f"metric: {found['metric']}"]
    if found["comparison"] != ">":
        parts.append(f'comparison: "{found["comparison"]}"')
    parts += [f"threshold: {found['threshold']}", f"for: {found['window']}", f"action: {found['action']}"]
    if found["role"]:
        parts.append(f"role: {found['role']}")
    return f"a rule is an object, not text: write {text.strip()!r} as {{{', '.join(parts)}}}"


class Rule(Model):
    """``<metric> <comparison> <threshold> for <window> -> <action>``."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.metric) != has(self.query)",
                    "message": "a rule needs exactly one of metric (a catalog name) or query (raw PromQL)",
                },
                *_SCOPE_RULES,
                _VARIANT_RULE,
            ]
        }
    )

    name: str | None = Field(
        default=None,
        max_length=MAX_RULE_NAME_LENGTH,
        description="Shown in events; defaults to the rule's text.",
    )
    metric: str | None = Field(
        default=None,
        max_length=MAX_METRIC_LENGTH,
        description="A metric name from the operator's catalog (e.g. npu_utilization).",
    )
    # The bound is in the schema, and the validator below words the refusal with what would fit.
    query: str | None = Field(
        default=None,
        json_schema_extra={"maxLength": MAX_QUERY_LENGTH},
        description="Raw PromQL instead of a catalog metric; its series must carry namespace and inference "
        "labels (and replica for replica scope, pd_role with a role).",
    )
    comparison: Comparison = Field(default=">", description="How the metric compares to the threshold.")
    threshold: Threshold
    for_: Window = Field(
        alias="for", description="How long the condition must hold at every sample; at most 24h."
    )
    action: Action = Field(description=f"What to do while the condition holds: {ACTION_LIST}.")
    scope: Scope | None = Field(
        default=None, description="fleet (aggregate over replicas) or replica; default by action."
    )
    to: str | None = Field(
        default=None,
        max_length=20,
        description="shift_traffic only: the variant (spec.variants[].name) the requests move to.",
    )
    role: Role | None = Field(
        default=None,
        description="With spec.disaggregation (where every rule names one): the role whose series the rule "
        "reads and whose instances it acts on; scale_up and scale_down change that role's parallelism.data "
        "within its autoscaling bounds and spec.disaggregation.ratio.",
    )
    step: Step = Field(
        default=25,
        description="shift_traffic only: percent of the requests moved per firing (at most one per "
        "autoscaling.shiftCooldown), written 25 or '25%'; a fraction rounds up ('12.5%' moves 13).",
    )

    @model_validator(mode="before")
    @classmethod
    def _threshold_fits_metric(cls, data: object) -> object:
        """A duration for a latency, a percentage for a ratio: checked on the threshold as written. A rule
        written as text (the form rules are described in) is refused with the object it reads as."""
        if isinstance(data, str):
            raise ValueError(text_rule_sentence(data))
        if isinstance(data, dict):
            problem = threshold_unit_problem(data.get("metric"), data.get("threshold"))
            if problem is not None:
                raise ValueError(problem)
        return data

    @field_validator("query")
    @classmethod
    def _query_fits(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_QUERY_LENGTH:
            raise ValueError(
                f"{len(value)} characters, over the {MAX_QUERY_LENGTH} a rule's query may have (the operator "
                "parses every query on every pass); name the long part with a Prometheus recording rule and "
                "query the recorded series, or use a catalog metric"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> Rule:
        if (self.metric is None) == (self.query is None):
            raise ValueError("a rule needs exactly one of metric (a catalog name) or query (raw PromQL)")
        kind = action_kind(self.action)
        if self.scope is None:
            self.scope = kind.scope
        if kind.scope_only and self.scope != kind.scope:
            raise ValueError(kind.scope_sentence())
        if self.for_ > MAX_WINDOW_SECONDS:
            raise ValueError(window_sentence())
        if kind.takes_variant != (self.to is not None):
            raise ValueError(variant_sentence())
        return self

    def describe(self) -> str:
        """The rule as a user would write it, e.g. ``npu_utilization > 85% for 5m -> scale_up``."""
        subject = self.metric or "query"
        return (
            f"{subject} {self.comparison} {format_value(self.metric, self.threshold)} for "
            f"{format_duration(self.for_)}"
            f" -> {self.action}"
            + (f" {self.role}" if self.role is not None else "")
            + (f" to {self.to} by {self.step}%" if self.to is not None else "")
        )

    def display_name(self) -> str:
        return self.name or self.describe()


# Bounds the CEL cost of the per-rule checks, and Prometheus' work per object. 1.30's cost estimator charges the
# `for` rule's replace() about 629,000 per rule (an int-or-string node is sized at 3 MiB); times this bound it
# must stay within the 10,000,000 per-rule budget: 15 fits, 16 is 0.7 % over (docs/decisions.md).
MAX_RULES = 15


def default_rules() -> list[Rule]:
    """The two rules from the project's brief: what ``spec.rules`` holds when the user lists none."""
    return [
        Rule(metric="npu_utilization", threshold="85%", for_="5m", action="scale_up"),
        Rule(metric="mem_fragmentation", threshold="15%", for_="10m", action="restart_service"),
    ]


def builtin_safety_rules(roles: Sequence[Role | None] = ()) -> list[Rule]:
    """Rules that run beside ``spec.rules`` whatever it lists: the replacement of a replica on a faulty NPU, once
    per role on a two-role fleet (``roles``), each role's replicas read and replaced apart."""
    return [
        Rule(metric=NPU_UNHEALTHY, threshold=0, for_="30s", action="replace", role=role)
        for role in (roles or (None,))
    ]


def _replaces(listed: Rule, safety: Rule) -> bool:
    """A listed rule on the same metric with the same action (and role) takes a safety rule's place (its own
    window, threshold or scope); a rule that only notifies on the metric leaves the safety rule running."""
    return listed.metric == safety.metric and listed.action == safety.action and listed.role == safety.role


def with_safety_rules(listed: list[Rule], safety: bool, roles: Sequence[Role] = ()) -> list[Rule]:
    """The rules the control loop evaluates: the listed ones, then each built-in safety rule (``safety``
    on) that no listed rule replaces; ``roles``: those of a two-role fleet."""
    builtin = builtin_safety_rules(roles) if safety else []
    return [*listed, *(s for s in builtin if not any(_replaces(r, s) for r in listed))]


class Disruption(Model):
    """How many replicas may be out of service at once, and how long a drain lasts."""

    max_unavailable: int = Field(
        default=1, ge=1, description="Replicas out of service at once (rollouts, restarts)."
    )
    drain_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="In-flight requests get this long after a leader leaves the Service.",
    )
