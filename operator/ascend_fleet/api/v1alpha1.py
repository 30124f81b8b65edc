"""AscendInference v1alpha1: the spec a user writes and the status the operator reports.

Field names are snake_case in Python and camelCase on the wire. Defaults are filled in here,
so every later layer sees a complete spec. The CRD's OpenAPI schema is generated from these
models (see ``crd.py``); their cross-field rules are mirrored there as CEL so the API server
rejects the same inputs. The parts live by concept in ``fields``, ``workload``, ``policy``, ``status_types``
and ``actions``; this module holds the spec and the object and exports every part under its old path.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ..engines.base import PREFILL_DELAYER, SHORT_REQUEST_FIRST
from ..engines.registry import builtin_facts, facts_of
from .actions import Scope, action_kind
from .availability import Availability
from .checks import DEFAULT_NPUS_PER_NODE, ENGINE_TYPE, engine_chip_problem
from .compilation import Compilation, cache_dir_problems
from .disaggregation import (
    ROLES,
    Disaggregation,
    KvTransferSpec,
    RoleAutoscaling,
    RoleParallelism,
    RoleSpec,
    connector_problems,
    fill_kv_defaults,
    rule_role_problems,
)
from .fields import (
    Action,
    Chip,
    Comparison,
    Duration,
    Model,
    MultiNode,
    Precision,
    RegisteredEngineType,
    RoutingMode,
    SchedulingPolicy,
    Threshold,
    Window,
)
from .images import default_image
from .policy import (
    DEFAULT_SCOPE,
    MAX_RULES,
    Autoscaling,
    Disruption,
    GatewayRef,
    PriorityClass,
    Routing,
    Rule,
    Scheduling,
    builtin_safety_rules,
    default_classes,
    default_rules,
    with_safety_rules,
)
from .status_types import (
    ActionRecord,
    AscendInferenceStatus,
    Condition,
    GroupRestart,
    LayoutStatus,
    RolesStatus,
    RoleStatus,
    TrafficShare,
    TuningRecord,
    TuningRung,
)
from .workload import (
    CRD_DEFAULT,
    MAX_VARIANTS,
    Batching,
    Engine,
    EnvVar,
    Hardware,
    Memory,
    ModelSource,
    Parallelism,
    PodTemplate,
    PrecisionVariant,
    PrefillDelayer,
    TemplateMetadata,
)

# The adaptive in-flight limit runs in the endpoint picker; a plain Service has none.
ADAPTIVE_NEEDS_POOL = (
    "batching.ttftTarget needs routing.mode inferencePool: the endpoint picker holds each engine's adaptive "
    "in-flight limit, and a plain Service has none; set routing.mode: inferencePool, or remove ttftTarget"
)


def _engine_types_with(feature: str) -> list[str]:
    return [facts.type for facts in builtin_facts() if feature in facts.features]


def _cel_engine_is_one_of(types: list[str]) -> str:
    """CEL that holds for the listed engine types."""
    return " || ".join(f"{ENGINE_TYPE} == '{t}'" for t in types)


def _has_feature(engine_type: str, feature: str) -> bool:
    return feature in facts_of(engine_type).features


def variant_problems(spec: AscendInferenceSpec) -> list[str]:
    """Why the spec's variants, or its shift_traffic rules, cannot run as written (each a sentence)."""
    names = [v.name for v in spec.variants]
    problems = []
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        problems.append(f"spec.variants: names must be distinct, repeated: {', '.join(repeated)}")
    if spec.variants and spec.routing.mode != "inferencePool":
        problems.append(
            "spec.variants needs spec.routing.mode inferencePool: the endpoint picker's InferenceModelRewrite "
            "splits the requests between the variants, and a plain Service cannot; set routing.mode: "
            "inferencePool, or remove spec.variants"
        )
    mount = spec.model.mount_path.rstrip("/") + "/"
    for index, variant in enumerate(spec.variants):
        if variant.model and spec.model.volume is not None and not variant.model.startswith(mount):
            problems.append(
                f"spec.variants[{index}].model {variant.model!r} is not under model.mountPath "
                f"{spec.model.mount_path!r}, where the weights volume is mounted; put the variant's weights "
                "on the same volume"
            )
    for index, rule in enumerate(spec.rules):
        if action_kind(rule.action).takes_variant and rule.to not in names:
            have = f"one of {', '.join(names)}" if names else "a variant, and spec.variants lists none"
            problems.append(
                f"spec.rules[{index}].to: {rule.action} moves traffic to a variant; {rule.to!r} is not one "
                f"(spec.variants names {have})"
            )
    return problems


class AscendInferenceSpec(Model):
    """What the user asks for."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.scheduling) || !has(self.scheduling.policy) || "
                    "self.scheduling.policy != 'short-request-first' || "
                    + _cel_engine_is_one_of(_engine_types_with(SHORT_REQUEST_FIRST)),
                    "message": "scheduling.policy short-request-first needs engine.type vllm-ascend (SGLang has no "
                    "prompt-length scheduler: use policy fcfs with routing.classes)",
                },
                {
                    "rule": "!has(self.batching) || !has(self.batching.prefillDelayer) "
                    "|| " + _cel_engine_is_one_of(_engine_types_with(PREFILL_DELAYER)),
                    "message": "batching.prefillDelayer is SGLang's prefill delayer; vllm-ascend has none: "
                    "remove it, or use engine.type sglang",
                },
                {
                    "rule": "!has(self.batching) || !has(self.batching.ttftTarget) || (has(self.routing) && "
                    "has(self.routing.mode) && self.routing.mode == 'inferencePool')",
                    "message": ADAPTIVE_NEEDS_POOL,
                },
            ]
        }
    )

    model: ModelSource
    engine: Engine
    parallelism: Parallelism = Field(
        default_factory=Parallelism, json_schema_extra={"x-crd-default-object": True}
    )
    hardware: Hardware = Field(default_factory=Hardware)
    batching: Batching = Field(default_factory=Batching)
    memory: Memory = Field(default_factory=Memory)
    precision: Precision = Field(
        default="bf16", description="bf16, fp16, or int8 (ModelSlim-quantized weights)."
    )
    scheduling: Scheduling = Field(default_factory=Scheduling)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)
    rules: list[Rule] = Field(
        default_factory=default_rules,
        max_length=MAX_RULES,
        description="Control-loop rules; default: npu_utilization > 85% for 5m -> scale_up and "
        "mem_fragmentation > 15% for 10m -> restart_service; [] lists none. The built-in safety rules run "
        "beside them (see safetyRules). With spec.disaggregation every rule names its role, and there is no "
        "default: the fleet runs the rules it lists.",
    )
    safety_rules: bool = Field(
        default=True,
        description="Run the built-in safety rules beside spec.rules, whatever it lists: "
        "npu_unhealthy > 0 for 30s -> replace (with spec.disaggregation, one per role). A listed rule on the "
        "same metric with the same action (and role) takes a safety rule's place; false runs spec.rules alone.",
    )
    disruption: Disruption = Field(default_factory=Disruption)
    template: PodTemplate | None = Field(
        default=None,
        description="A partial pod template merged into every engine pod: labels, annotations, affinity, pull "
        "secrets, service account, sidecars, ... Fields the operator owns are refused.",
    )
    variants: list[PrecisionVariant] = Field(
        default_factory=list,
        max_length=MAX_VARIANTS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Precision variants served side by side behind the one InferencePool (needs routing.mode "
        "inferencePool): replica i runs variant i mod their number, serving the model as <model.name>-<name>; "
        "the endpoint picker splits requests for model.name between them by the weights in status.traffic. "
        "Empty: every replica runs spec.precision.",
    )
    routing: Routing = Field(default_factory=Routing)
    availability: Availability | None = Field(
        default=None,
        description="Spread replicas over nodes or zones; absent places them wherever they fit.",
    )
    disaggregation: Disaggregation | None = Field(
        default=None,
        description="Prefill and decode on instances of their own, each role with its parallel layout, the KV "
        "cache moving between them (spec.parallelism is then unused; docs/disaggregation.md). Absent: every "
        "replica does both.",
    )

    @model_validator(mode="after")
    def _policy_fits_engine(self) -> AscendInferenceSpec:
        if self.scheduling.policy == "short-request-first" and not _has_feature(
            self.engine.type, SHORT_REQUEST_FIRST
        ):
            raise ValueError(
                "spec.scheduling.policy short-request-first needs engine.type vllm-ascend: SGLang has no "
                "prompt-length scheduler (its policies are fcfs, lof, lpm, dfs-weight, random); use policy fcfs "
                "with spec.routing.classes to dispatch short prompts first at the endpoint picker"
            )
        return self

    @model_validator(mode="after")
    def _engine_knobs(self) -> AscendInferenceSpec:
        if self.batching.prefill_delayer is not None and not _has_feature(self.engine.type, PREFILL_DELAYER):
            raise ValueError(
                "batching.prefillDelayer is SGLang's prefill delayer; vllm-ascend has none: remove it, "
                "or use engine.type sglang"
            )
        return self

    @model_validator(mode="after")
    def _adaptive_limit_routed(self) -> AscendInferenceSpec:
        if self.batching.ttft_target is not None and self.routing.mode != "inferencePool":
            raise ValueError(ADAPTIVE_NEEDS_POOL)
        return self

    @model_validator(mode="after")
    def _compile_cache_fits(self) -> AscendInferenceSpec:
        compilation = self.engine.compilation
        if compilation is None or compilation.cache_dir is None:
            return self
        own = facts_of(self.engine.type).compilation
        problems = cache_dir_problems(
            compilation.cache_dir,
            self.model.mount_path if self.model.volume is not None else None,
            [variable.name for variable in self.engine.env],
            own.cache_env if own is not None else None,
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _engine_runs_on_chip(self) -> AscendInferenceSpec:
        problem = engine_chip_problem(self.engine.type, self.hardware.chip)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _variants_fit(self) -> AscendInferenceSpec:
        problems = variant_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def rules_in_force(self) -> list[Rule]:
        """The rules the control loop evaluates: spec.rules, then the built-in safety rules it keeps (on a
        two-role fleet, one per role)."""
        roles = ROLES if self.disaggregation is not None else ()
        return with_safety_rules(self.rules, self.safety_rules, roles)

    @model_validator(mode="after")
    def _two_roles(self) -> AscendInferenceSpec:
        split = self.disaggregation
        if split is not None and "rules" not in self.model_fields_set:
            # The default rules name no role: a two-role fleet runs the rules it lists, per role.
            self.rules = []
        problems = rule_role_problems(self.rules, split)
        if problems:
            raise ValueError("; ".join(problems))
        if split is None:
            return self
        if self.variants:
            raise ValueError(
                "spec.disaggregation and spec.variants do not go together yet: a two-role fleet serves one "
                "precision; remove spec.variants, or spec.disaggregation"
            )
        if self.parallelism != Parallelism():
            raise ValueError(
                "spec.parallelism is unused with spec.disaggregation: each role has its own "
                "(disaggregation.prefill.parallelism, disaggregation.decode.parallelism); remove spec.parallelism, "
                "and scale a role by its parallelism.data rather than through the scale subresource"
            )
        node = self.hardware.npus_per_node or DEFAULT_NPUS_PER_NODE[self.hardware.chip]
        fill_kv_defaults(split, self.engine.type, self.hardware.chip, node)
        problems = connector_problems(split, self.engine.type)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def image(self) -> str | None:
        """The engine image to run: the user's, or the upstream one for the engine and chip (None: no image)."""
        return self.engine.image or default_image(self.engine.type, self.hardware.chip)


class AscendInference(Model):
    """The whole object, as read from a file or the API server."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    api_version: Literal["inference.ascendfleet.io/v1alpha1"] = "inference.ascendfleet.io/v1alpha1"
    kind: Literal["AscendInference"] = "AscendInference"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: AscendInferenceSpec
    status: AscendInferenceStatus | None = None

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "default")


__all__ = [
    "Action",
    "ActionRecord",
    "AscendInference",
    "AscendInferenceSpec",
    "AscendInferenceStatus",
    "Autoscaling",
    "Batching",
    "CRD_DEFAULT",
    "Chip",
    "Comparison",
    "Compilation",
    "Condition",
    "DEFAULT_SCOPE",
    "Disaggregation",
    "Disruption",
    "Duration",
    "Engine",
    "EnvVar",
    "GatewayRef",
    "KvTransferSpec",
    "GroupRestart",
    "Hardware",
    "LayoutStatus",
    "RoleStatus",
    "RolesStatus",
    "MAX_RULES",
    "Memory",
    "Model",
    "ModelSource",
    "MultiNode",
    "Parallelism",
    "PodTemplate",
    "Precision",
    "PrefillDelayer",
    "PriorityClass",
    "RegisteredEngineType",
    "Routing",
    "RoutingMode",
    "RoleAutoscaling",
    "RoleParallelism",
    "RoleSpec",
    "Rule",
    "Scheduling",
    "SchedulingPolicy",
    "Scope",
    "TemplateMetadata",
    "TrafficShare",
    "Threshold",
    "TuningRecord",
    "TuningRung",
    "PrecisionVariant",
    "Window",
    "builtin_safety_rules",
    "default_classes",
    "default_rules",
]
