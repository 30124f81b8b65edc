"""AscendInference v1alpha1: the spec a user writes and the status the operator reports.

Field names are snake_case in Python and camelCase on the wire. Defaults are filled in here,
so every later layer sees a complete spec. The CRD's OpenAPI schema is generated from these
models (see ``crd.py``); the cross-field rules below are mirrored there as CEL so the API server
rejects the same inputs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict
from pydantic_core import PydanticCustomError

from ..engines.base import PREFILL_DELAYER, SHORT_REQUEST_FIRST
from ..engines.registry import BUILTIN_TYPES, builtin_facts, engine_types, facts_of
from .checks import (
    DEFAULT_NPUS_PER_NODE,
    ENGINE_TYPE,
    MAX_DURATION_LENGTH,
    MAX_MODEL_DIMENSION,
    MAX_WINDOW_SECONDS,
    engine_chip_problem,
    window_sentence,
    window_validations,
)
from .images import default_image
from .k8s import EnvVarSource, ResourceRequirements, Size, Toleration, VolumeSource, env_name_problem
from .units import DURATION_PATTERN, THRESHOLD_PATTERN, format_duration, parse_duration, parse_threshold

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
    WithJsonSchema({**_DURATION_SCHEMA, "x-kubernetes-validations": window_validations()}),
]
"""A rule's window: a Duration of at most ``MAX_WINDOW_SECONDS`` (the CRD says so too)."""

Threshold = Annotated[
    float,
    BeforeValidator(parse_threshold),
    # A number or a string: no structural type covers both, and the API server compiles no CEL on an
    # untyped node, so OpenAPI value checks do the work (pattern applies to strings, minimum to numbers).
    WithJsonSchema(
        {
            "x-kubernetes-preserve-unknown-fields": True,
            "description": 'A number such as 0.85 or 12, or a percentage string such as "85%".',
            "pattern": THRESHOLD_PATTERN,
            "minimum": 0,
        }
    ),
]
"""A plain number; percentages are converted to ratios (``"85%"`` -> 0.85)."""

MultiNode = Literal["ray", "native"]
Chip = Literal["ascend910a", "ascend910b", "ascend910_93"]
Precision = Literal["bf16", "fp16", "int8"]
Action = Literal["scale_up", "scale_down", "restart_service", "notify"]
Comparison = Literal[">", ">=", "<", "<="]
Scope = Literal["fleet", "replica"]
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


def _engine_types_with(feature: str) -> list[str]:
    return [facts.type for facts in builtin_facts() if feature in facts.features]


def _cel_engine_is_one_of(types: list[str]) -> str:
    """CEL that holds for the listed engine types."""
    return " || ".join(f"{ENGINE_TYPE} == '{t}'" for t in types)


def _has_feature(engine_type: str, feature: str) -> bool:
    return feature in facts_of(engine_type).features


class Model(BaseModel):
    """Base for every API type: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, defaults included."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


class ModelSource(Model):
    """Which model to serve and where its weights are."""

    name: str = Field(
        min_length=1,
        max_length=128,
        description="Served model name: what clients put in the OpenAI API's `model` field.",
    )
    path: str = Field(
        min_length=1,
        pattern=r"^/",
        description="Absolute path of the weights inside the engine container.",
    )
    volume: VolumeSource | None = Field(
        default=None,
        description="A Kubernetes volume source holding the weights (e.g. persistentVolumeClaim, nfs; hostPath only "
        "where the operator configuration allows it), "
        "mounted read-only at mountPath.",
    )
    mount_path: str = Field(
        default="/models",
        pattern=r"^/",
        description="Where the volume is mounted; path must lie under it when a volume is given.",
    )
    num_attention_heads: int | None = Field(
        default=None,
        ge=1,
        le=MAX_MODEL_DIMENSION,
        description="Optional: lets the planner check that tensor divides the heads.",
    )
    num_layers: int | None = Field(
        default=None,
        ge=1,
        le=MAX_MODEL_DIMENSION,
        description="Optional: lets the planner check that pipeline fits the layers.",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, description="Maximum context length, if not the model's."
    )

    @model_validator(mode="after")
    def _path_under_mount(self) -> ModelSource:
        if self.volume is not None and not _is_under(self.path, self.mount_path):
            raise ValueError(
                f"model.path {self.path!r} is not under model.mountPath {self.mount_path!r}, where the volume "
                f"is mounted; set mountPath to a parent of path, e.g. {_parent(self.path)!r}"
            )
        return self


def _is_under(path: str, parent: str) -> bool:
    parent = parent.rstrip("/") or "/"
    return parent == "/" or path == parent or path.startswith(parent + "/")


def _parent(path: str) -> str:
    head = path.rstrip("/").rsplit("/", 1)[0]
    return head or "/"


class EnvVar(Model):
    """An environment variable: a literal value or a Kubernetes valueFrom source."""

    name: str = Field(
        min_length=1, max_length=256, description="Variable name (a C identifier or a dotted name)."
    )
    value: str | None = Field(
        default=None, description="A literal value; $(VAR) refers to an earlier variable."
    )
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _valid_for_a_container(self) -> EnvVar:
        problem = env_name_problem(self.name)
        if problem:
            raise ValueError(problem)
        if self.value and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self


class Engine(Model):
    """The serving engine and how its pods run."""

    type: RegisteredEngineType = Field(description="vllm-ascend or sglang.")
    image: str | None = Field(
        default=None, description="Engine image; defaults to the upstream image for the engine and chip."
    )
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="HTTP port of the OpenAI API (default 8000 vLLM, 30000 SGLang).",
    )
    args: list[str] = Field(
        default_factory=list,
        description="Extra engine arguments, appended; one that repeats a generated flag is rejected.",
    )
    env: list[EnvVar] = Field(default_factory=list, description="Extra environment; a name set here wins.")
    resources: ResourceRequirements | None = Field(
        default=None, description="CPU/memory requests and limits (the NPU resource is set from the layout)."
    )
    exporter: bool = Field(default=True, description="Run the project's NPU exporter inside the engine.")
    startup_timeout: Duration = Field(
        default=1800.0, description="How long model loading may take before the startup probe gives up."
    )
    shm_size: Size = Field(
        default="16Gi",
        description="Size limit of the in-memory /dev/shm: a Kubernetes quantity such as 16Gi.",
    )
    multi_node: MultiNode | None = Field(
        default=None,
        description="vLLM replicas spanning pods: native (--nnodes/--node-rank/--master-addr, --headless on "
        "non-leaders; vLLM 0.23+) or ray; default native where the image's vLLM has it, else ray.",
    )

    @model_validator(mode="after")
    def _fill_defaults(self) -> Engine:
        if self.port is None:
            self.port = facts_of(self.type).default_port
        return self


# Marks a field whose default the CRD declares too, so the API server stores it: the parallel layout,
# which printer columns and the scale subresource read. Other defaults stay out of the CRD (pydantic
# fills them in), which keeps what users wrote, and their GitOps diffs, unchanged.
CRD_DEFAULT: JsonDict = {"x-crd-default": True}


class Parallelism(Model):
    """The hybrid parallel layout: tensor x pipeline NPUs per replica, data replicas."""

    tensor: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Tensor-parallel size (never crosses a node).",
        json_schema_extra=CRD_DEFAULT,
    )
    pipeline: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Pipeline-parallel stages per replica.",
        json_schema_extra=CRD_DEFAULT,
    )
    data: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="Number of replicas; the scale subresource changes this field.",
        json_schema_extra=CRD_DEFAULT,
    )


class Hardware(Model):
    """The NPU nodes the engines run on."""

    chip: Chip = Field(default="ascend910b", description="ascend910a, ascend910b or ascend910_93 (A3).")
    npus_per_node: int | None = Field(
        default=None, ge=1, le=64, description="NPUs per node (default 8; 16 for ascend910_93)."
    )
    resource_name: str = Field(
        default="huawei.com/Ascend910",
        min_length=1,
        description="Device-plugin resource to request (huawei.com/Ascend910, huawei.com/ascend-1980, ...).",
    )
    ascend_runtime: bool = Field(
        default=True,
        description="True when the Ascend Docker Runtime injects the driver; false mounts the driver from the host.",
    )
    network_interface: str = Field(
        default="eth0", min_length=1, description="Interface for HCCL/GLOO traffic in multi-pod replicas."
    )

    @model_validator(mode="after")
    def _fill_defaults(self) -> Hardware:
        if self.npus_per_node is None:
            self.npus_per_node = DEFAULT_NPUS_PER_NODE[self.chip]
        return self


class PrefillDelayer(Model):
    """SGLang's prefill delayer: holds new prefills back a little so they batch together (SGLang >= 0.5.7)."""

    enabled: bool = Field(default=True, description="--enable-prefill-delayer.")
    max_delay_ms: float | None = Field(
        default=None, gt=0, description="--prefill-delayer-max-delay-ms: the longest a prefill is held back."
    )
    queue_min_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="--prefill-delayer-queue-min-ratio: wait until the queue holds this share of the running "
        "requests (typical 0.1 to 0.5).",
    )


class Batching(Model):
    """Continuous-batching limits (engine defaults when unset) and the engines' own adaptive knobs."""

    max_batch_size: int | None = Field(default=None, ge=1, description="Sequences in a batch.")
    max_batch_tokens: int | None = Field(default=None, ge=1, description="Tokens scheduled in one step.")
    chunked_prefill: bool | None = Field(
        default=None,
        description="Split long prompts into chunks batched with decodes (vLLM --[no-]enable-chunked-prefill; "
        "SGLang: false sets --chunked-prefill-size -1). Unset keeps the engine's default (on in both).",
    )
    prefill_delayer: PrefillDelayer | None = Field(
        default=None, description="SGLang only: its adaptive prefill delayer (engine.type sglang)."
    )


def _or(field: str, default: object) -> str:
    """CEL for a field's value with the default pydantic would fill in (CEL sees only what was written)."""
    return f"(has(self.{field}) ? self.{field} : {default})"


_MEMORY_SUM = " + ".join(
    (_or("staticFraction", 0.60), _or("dynamicFraction", 0.25), _or("reserveFraction", 0.15))
)


class Memory(Model):
    """How each NPU's HBM is split: static (weights + KV cache), dynamic (activations), reserve."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{_MEMORY_SUM} >= 0.999 && {_MEMORY_SUM} <= 1.001",
                    "message": "staticFraction + dynamicFraction + reserveFraction must add up to 1.0 "
                    "(defaults 0.60 + 0.25 + 0.15)",
                }
            ]
        }
    )

    static_fraction: float = Field(
        default=0.60, gt=0, le=1, description="Share of each NPU's HBM for the weights and the KV cache."
    )
    dynamic_fraction: float = Field(
        default=0.25, ge=0, le=1, description="Share for activations and other short-lived tensors."
    )
    reserve_fraction: float = Field(
        default=0.15, ge=0, le=1, description="Share left free, so fragmentation does not run out of memory."
    )
    expandable_segments: bool = Field(
        default=True, description="PYTORCH_NPU_ALLOC_CONF=expandable_segments:True (keeps fragmentation low)."
    )

    @model_validator(mode="after")
    def _sums_to_one(self) -> Memory:
        total = self.static_fraction + self.dynamic_fraction + self.reserve_fraction
        if abs(total - 1.0) > 1e-3:
            raise ValueError(
                f"memory fractions add up to {total:.2f} (static {self.static_fraction:g} + dynamic "
                f"{self.dynamic_fraction:g} + reserve {self.reserve_fraction:g}); they must add up to 1.0"
            )
        return self


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
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels every engine pod requires (the pod's nodeSelector)."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=64,
        description="Taints the engine pods tolerate (the pod's tolerations).",
    )
    scheduler_name: str | None = Field(default=None, description="e.g. volcano.")
    priority_class_name: str | None = Field(
        default=None, description="PriorityClass of the engine pods (preemption order under pressure)."
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

    Short prompts are dispatched first, as the seeds' scheduler does, so long prompts stop holding them up.
    """
    return [
        PriorityClass(name="long", priority=0, max_queue=16, min_prompt_tokens=2049),
        PriorityClass(name="medium", priority=1, max_queue=32, min_prompt_tokens=513),
        PriorityClass(name="short", priority=2, max_queue=64, min_prompt_tokens=0),
    ]


class GatewayRef(Model):
    """The Gateway an HTTPRoute attaches the InferencePool to."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Gateway (in this namespace).")
    namespace: str | None = Field(default=None, description="Default: the inference's namespace.")
    section_name: str | None = Field(default=None, description="A listener of the Gateway.")


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


class Autoscaling(Model):
    """Bounds and pacing for the control loop's scale and restart actions."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{_or('minReplicas', 1)} <= {_or('maxReplicas', 8)}",
                    "message": "minReplicas must be <= maxReplicas (defaults 1 and 8)",
                }
            ]
        }
    )

    min_replicas: int = Field(default=1, ge=0, description="Fewest replicas a rule may scale down to.")
    max_replicas: int = Field(default=8, ge=1, description="Most replicas a rule may scale up to.")
    scale_up_cooldown: Duration = Field(default=180.0, description="Quiet time after a scale-up.")
    scale_down_cooldown: Duration = Field(default=600.0, description="Quiet time after a scale-down.")
    restart_cooldown: Duration = Field(
        default=600.0, description="Quiet time between rule restarts of one replica."
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


DEFAULT_SCOPE: dict[str, Scope] = {
    "scale_up": "fleet",
    "scale_down": "fleet",
    "restart_service": "replica",
    "notify": "fleet",
}


class Rule(Model):
    """``<metric> <comparison> <threshold> for <window> -> <action>``."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.metric) != has(self.query)",
                    "message": "a rule needs exactly one of metric (a catalog name) or query (raw PromQL)",
                },
                {
                    "rule": "self.action != 'restart_service' || !has(self.scope) || self.scope == 'replica'",
                    "message": "restart_service acts on one replica; use scope: replica (the default)",
                },
            ]
        }
    )

    name: str | None = Field(default=None, description="Shown in events; defaults to the rule's text.")
    metric: str | None = Field(
        default=None, description="A metric name from the operator's catalog (e.g. npu_utilization)."
    )
    query: str | None = Field(
        default=None,
        description="Raw PromQL instead of a catalog metric; its series must carry namespace and inference "
        "labels (and replica for replica scope).",
    )
    comparison: Comparison = Field(default=">", description="How the metric compares to the threshold.")
    threshold: Threshold
    for_: Window = Field(
        alias="for", description="How long the condition must hold at every sample; at most 24h."
    )
    action: Action = Field(
        description="What to do while the condition holds: scale_up, scale_down or restart_service."
    )
    scope: Scope | None = Field(
        default=None, description="fleet (aggregate over replicas) or replica; default by action."
    )

    @model_validator(mode="after")
    def _check(self) -> Rule:
        if (self.metric is None) == (self.query is None):
            raise ValueError("a rule needs exactly one of metric (a catalog name) or query (raw PromQL)")
        if self.scope is None:
            self.scope = DEFAULT_SCOPE[self.action]
        if self.action == "restart_service" and self.scope != "replica":
            raise ValueError("restart_service acts on one replica; use scope: replica (the default)")
        if self.for_ > MAX_WINDOW_SECONDS:
            raise ValueError(window_sentence())
        return self

    def describe(self) -> str:
        """The rule as a user would write it, e.g. ``npu_utilization > 85% for 5m -> scale_up``."""
        from .units import format_threshold

        subject = self.metric or "query"
        return (
            f"{subject} {self.comparison} {format_threshold(self.threshold)} for {format_duration(self.for_)}"
            f" -> {self.action}"
        )

    def display_name(self) -> str:
        return self.name or self.describe()


MAX_RULES = 32  # bounds the CEL cost of the per-rule checks, and Prometheus' work per object


def default_rules() -> list[Rule]:
    """The two rules from the project's brief."""
    return [
        Rule(metric="npu_utilization", threshold="85%", for_="5m", action="scale_up"),
        Rule(metric="mem_fragmentation", threshold="15%", for_="10m", action="restart_service"),
    ]


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


class TemplateMetadata(Model):
    """Labels and annotations added to every engine pod."""

    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels added to every engine pod (the operator's own keys win)."
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations added to every engine pod."
    )


_OPEN_OBJECT: JsonDict = {"x-kubernetes-preserve-unknown-fields": True, "type": "object"}


class PodTemplate(Model):
    """A partial PodTemplateSpec merged into every engine pod (strategic-merge semantics)."""

    metadata: TemplateMetadata | None = None
    spec: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra=_OPEN_OBJECT,
        description="Pod spec fields: affinity, tolerations, nodeSelector, imagePullSecrets, serviceAccountName, "
        "priorityClassName, securityContext, volumes, initContainers, containers (the one named engine takes "
        "env, volumeMounts and resources; others are sidecars), automountServiceAccountToken, ...",
    )


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
        description="Control-loop rules; [] disables them.",
    )
    disruption: Disruption = Field(default_factory=Disruption)
    template: PodTemplate | None = Field(
        default=None,
        description="A partial pod template merged into every engine pod: labels, annotations, affinity, pull "
        "secrets, service account, sidecars, ... Fields the operator owns are refused.",
    )
    routing: Routing = Field(default_factory=Routing)

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
    def _engine_runs_on_chip(self) -> AscendInferenceSpec:
        problem = engine_chip_problem(self.engine.type, self.hardware.chip)
        if problem:
            raise ValueError(problem)
        return self

    def image(self) -> str | None:
        """The engine image to run: the user's, or the upstream one for the engine and chip (None: no image)."""
        return self.engine.image or default_image(self.engine.type, self.hardware.chip)


# ----- status -----


class Condition(Model):
    """A standard Kubernetes condition (metav1.Condition shape)."""

    type: str = Field(description="Ready, Progressing, Degraded or MetricsAvailable.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="A CamelCase word for why (see docs/troubleshooting.md).")
    message: str = Field(default="", description="What the operator saw and what to do, in a sentence.")
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the condition was computed from."
    )


class LayoutStatus(Model):
    """How the parallelism maps onto NPUs and pods."""

    npus_per_replica: int = Field(description="NPUs of one replica: tensor x pipeline.")
    pods_per_replica: int = Field(description="Pods of one replica (a gang): one per node it spans.")
    npus_per_pod: int = Field(description="NPUs each pod requests.")
    total_npus: int = Field(description="NPUs of every replica together.")


class ActionRecord(Model):
    """One control-loop decision, newest first in status.actions."""

    time: str = Field(description="RFC 3339 time of the decision.")
    rule: str = Field(description="The rule's name, or its text.")
    metric: str | None = Field(
        default=None, description="The catalog metric the rule reads (absent for a query)."
    )
    value: float | None = Field(default=None, description="The value that held over the rule's window.")
    action: Action = Field(description="scale_up, scale_down or restart_service.")
    target: str = Field(description="fleet, or replica-N.")
    result: str = Field(
        default="", description="What happened, e.g. 'replicas 2 -> 3' or 'drained replica 1'."
    )
    dry_run: bool = Field(default=False, description="Recorded only: autoscaling.dryRun was on.")


class GroupRestart(Model):
    """How often a replica's gang was recreated after a failure, for the restart backoff."""

    replica: int = Field(description="The replica (data-parallel group) index.")
    count: int = Field(description="Recreations in a row; the backoff doubles with each.")
    last_time: str = Field(description="RFC 3339 time of the last recreation.")


class TuningRung(Model):
    """One measured rung of a tuning ladder."""

    batch_size: int = Field(description="The maxBatchSize the rung ran with.")
    adaptive: str = Field(
        default="", description="Engine-native knobs the rung ran with, e.g. prefillDelayer."
    )
    tokens_per_second: float = Field(description="Output tokens per second the fleet served.")
    ttft_p50_ms: float = Field(description="Median time to first token, in milliseconds.")
    ttft_p99_ms: float = Field(description="99th percentile time to first token, in milliseconds.")
    e2e_latency_p99_ms: float = Field(description="99th percentile request latency, in milliseconds.")
    npu_utilization: float | None = Field(
        default=None, description="Mean NPU utilization (0..1) over the rung."
    )


class TuningRecord(Model):
    """What the last `ascend-fleet tune` measured and chose."""

    time: str = Field(description="RFC 3339 time the choice was written.")
    batch_size: int = Field(description="The maxBatchSize chosen.")
    adaptive: str = Field(default="", description="Engine-native knobs chosen with it, if any.")
    goal: str = Field(description="What the choice optimised, e.g. 'ttft_p99 <= 100ms' or 'max throughput'.")
    reason: str = Field(default="", description="Why this rung, in a sentence.")
    table_hash: str = Field(
        description="sha256 of the measured table (canonical JSON), to match it to its report."
    )
    client: str = Field(default="", description="The benchmark client that measured it.")
    rungs: list[TuningRung] = Field(default_factory=list, description="The measured table.")


class AscendInferenceStatus(Model):
    """What the operator observed and did (unknown fields are refused, as in every status model)."""

    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status was computed from."
    )
    replicas: int = Field(default=0, description="Replicas (gangs) that exist, ready or not.")
    ready_replicas: int = Field(default=0, description="Replicas whose every pod is ready.")
    updated_replicas: int = Field(default=0, description="Replicas running the current revision.")
    selector: str = Field(
        default="", description="Label selector of the leader pods (the scale subresource's)."
    )
    revision: str | None = Field(default=None, description="Hash of the current pod template.")
    layout: LayoutStatus | None = Field(
        default=None, description="How the parallelism maps onto NPUs and pods."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, Progressing, Degraded and MetricsAvailable."
    )
    actions: list[ActionRecord] = Field(
        default_factory=list, description="The control loop's latest decisions, newest first."
    )
    group_restarts: list[GroupRestart] = Field(
        default_factory=list, description="Failure recreations per replica (drives the backoff)."
    )
    tuning: TuningRecord | None = Field(
        default=None, description="The last batch-size tuning run (ascend-fleet tune)."
    )


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
