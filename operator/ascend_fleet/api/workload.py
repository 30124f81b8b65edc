"""What one replica runs.

The model, the engine, the parallel layout, the hardware, batching, memory and the pod template.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.json_schema import JsonDict

from ..engines.registry import facts_of
from . import names
from .bounds import (
    MAX_ANNOTATION_LENGTH,
    MAX_ANNOTATIONS,
    MAX_ARG_LENGTH,
    MAX_ARGS,
    MAX_ENV,
    MAX_IMAGE_LENGTH,
    MAX_INTERFACE_LENGTH,
    MAX_LABEL_VALUE_LENGTH,
    MAX_LABELS,
    MAX_PATH_LENGTH,
    MAX_QUALIFIED_NAME_LENGTH,
)
from .checks import DEFAULT_NPUS_PER_NODE, MAX_MODEL_DIMENSION
from .compilation import Compilation, engine_compilation_problems, fusion_message, fusion_rule
from .fields import Chip, Duration, Model, MultiNode, Precision, RegisteredEngineType, cel_or_default
from .k8s import EnvVarSource, ResourceRequirements, Size, VolumeSource, env_name_problem

# The CRD bounds an argument by Linux's own limit; render/agreement.py refuses a longer one with the reason.
_ARGUMENT_SCHEMA: JsonDict = {"type": "string", "maxLength": MAX_ARG_LENGTH}


class ModelSource(Model):
    """Which model to serve and where its weights are."""

    name: str = Field(
        min_length=1,
        max_length=128,
        description="Served model name: what clients put in the OpenAI API's `model` field.",
    )
    path: str = Field(
        min_length=1,
        max_length=MAX_PATH_LENGTH,
        pattern=r"^/",
        description="Absolute path of the weights inside the engine container.",
    )
    volume: VolumeSource | None = Field(
        default=None,
        description="A Kubernetes volume source holding the weights (persistentVolumeClaim, csi, image, ... as Pod "
        'Security "restricted" admits; hostPath only where the operator configuration allows it), mounted '
        "read-only at mountPath.",
    )
    mount_path: str = Field(
        default="/models",
        max_length=MAX_PATH_LENGTH,
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
        default=None,
        json_schema_extra={"maxLength": MAX_ARG_LENGTH},
        description="A literal value; $(VAR) refers to an earlier variable.",
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

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{"rule": fusion_rule(), "message": fusion_message()}]}
    )

    type: RegisteredEngineType = Field(description="vllm-ascend or sglang.")
    image: str | None = Field(
        default=None,
        max_length=MAX_IMAGE_LENGTH,
        description="Engine image; defaults to the upstream image for the engine and chip.",
    )
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="HTTP port of the OpenAI API (default 8000 vLLM, 30000 SGLang).",
    )
    args: list[Annotated[str, WithJsonSchema(_ARGUMENT_SCHEMA)]] = Field(
        default_factory=list,
        max_length=MAX_ARGS,
        description="Extra engine arguments, appended; one that repeats a generated flag is rejected.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=MAX_ENV,
        description="Extra environment; a name set here wins, except the NPU device variables and those the "
        "operator sets for its flags and exporter (POD_NAME, POD_NAMESPACE, POD_IP, LEADER_ADDRESS, "
        "ASCEND_FLEET_EXPORTER, ASCEND_FLEET_EXPORTER_PORT).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(e, !(e.name in "
                    + str(list(names.DEVICE_ENV + names.OPERATOR_ENV))
                    + "))",
                    "message": "engine.env may not set the NPU device variables (ASCEND_VISIBLE_DEVICES, "
                    "ASCEND_RT_VISIBLE_DEVICES: NPUs come from spec.parallelism) nor those the operator sets "
                    "(POD_NAME, POD_NAMESPACE, POD_IP, LEADER_ADDRESS, ASCEND_FLEET_EXPORTER, "
                    "ASCEND_FLEET_EXPORTER_PORT); use names of your own",
                }
            ]
        },
    )
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
    compilation: Compilation | None = Field(
        default=None,
        description="Graph mode, captured batch sizes, fusion passes and the compile cache, rendered into the "
        "engine's own options (docs/compilation.md); absent: the engine's defaults. While it is set, "
        "engine.args may not carry the engine's compilation options.",
    )

    @model_validator(mode="after")
    def _fill_defaults(self) -> Engine:
        if self.port is None:
            self.port = facts_of(self.type).default_port
        return self

    @model_validator(mode="after")
    def _compilation_fits(self) -> Engine:
        if self.compilation is not None:
            problems = engine_compilation_problems(self.compilation, facts_of(self.type))
            if problems:
                raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _env_names_free(self) -> Engine:
        problems = [
            f"spec.engine.env[{index}]: {problem}"
            for index, variable in enumerate(self.env)
            if (problem := names.reserved_env_problem(variable.name, engine=True))
        ]
        if problems:
            raise ValueError("; ".join(problems))
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
        max_length=MAX_QUALIFIED_NAME_LENGTH,
        description="Device-plugin resource to request (huawei.com/Ascend910, huawei.com/ascend-1980, ...).",
    )
    ascend_runtime: bool = Field(
        default=True,
        description="True when the Ascend Docker Runtime injects the driver; false mounts the driver from the host.",
    )
    network_interface: str = Field(
        default="eth0",
        min_length=1,
        max_length=MAX_INTERFACE_LENGTH,
        description="Interface for HCCL/GLOO traffic in multi-pod replicas.",
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


# The adaptive in-flight limit's rules, as CEL on Batching (and the same sentences from its validator).
_ADAPTIVE_RULES: list[JsonDict] = [
    {
        "rule": "!has(self.minBatchSize) || !has(self.maxBatchSize) || self.minBatchSize <= self.maxBatchSize",
        "message": "batching.minBatchSize must be at most batching.maxBatchSize",
    },
    {
        "rule": "!has(self.ttftTarget) || has(self.maxBatchSize)",
        "message": "batching.ttftTarget adapts each engine's in-flight limit up to batching.maxBatchSize: "
        "set maxBatchSize",
    },
    {
        "rule": "!has(self.minBatchSize) || has(self.ttftTarget)",
        "message": "batching.minBatchSize is the lower bound of the adaptive in-flight limit: set "
        "batching.ttftTarget, or remove minBatchSize",
    },
]


class Batching(Model):
    """Continuous-batching limits (engine defaults when unset) and the engines' own adaptive knobs."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [*_ADAPTIVE_RULES]})

    max_batch_size: int | None = Field(default=None, ge=1, description="Sequences in a batch.")
    min_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="With ttftTarget: the least in-flight requests the endpoint picker keeps allowing each "
        "engine, however slow its first tokens (default 1).",
    )
    ttft_target: Duration | None = Field(
        default=None,
        description="A first-token target (500ms, 1s): the endpoint picker adapts each engine's in-flight "
        "limit between minBatchSize and maxBatchSize to hold it, one more while first tokens come within it "
        "and the engine's queue is empty, a quarter fewer when not (needs routing.mode inferencePool and "
        "maxBatchSize; docs/routing.md). Unset: the limit is the engine's maxBatchSize.",
    )
    max_batch_tokens: int | None = Field(default=None, ge=1, description="Tokens scheduled in one step.")
    chunked_prefill: bool | None = Field(
        default=None,
        description="Split long prompts into chunks batched with decodes (vLLM --[no-]enable-chunked-prefill; "
        "SGLang: false sets --chunked-prefill-size -1). Unset keeps the engine's default (on in both).",
    )
    prefill_delayer: PrefillDelayer | None = Field(
        default=None, description="SGLang only: its adaptive prefill delayer (engine.type sglang)."
    )

    @model_validator(mode="after")
    def _adaptive_limit(self) -> Batching:
        problems = []
        if self.ttft_target is not None and self.ttft_target <= 0:
            problems.append("batching.ttftTarget must be above zero, e.g. 500ms or 1s")
        if (
            self.min_batch_size is not None
            and self.max_batch_size is not None
            and self.min_batch_size > self.max_batch_size
        ):
            problems.append(
                f"batching.minBatchSize {self.min_batch_size} must be at most batching.maxBatchSize "
                f"{self.max_batch_size}"
            )
        if self.ttft_target is not None and self.max_batch_size is None:
            problems.append(str(_ADAPTIVE_RULES[1]["message"]))
        if self.min_batch_size is not None and self.ttft_target is None:
            problems.append(str(_ADAPTIVE_RULES[2]["message"]))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def adaptive_min(self) -> int:
        """The adaptive limit's lower bound: minBatchSize, else 1."""
        return self.min_batch_size or 1


_MEMORY_SUM = " + ".join(
    (
        cel_or_default("staticFraction", 0.60),
        cel_or_default("dynamicFraction", 0.25),
        cel_or_default("reserveFraction", 0.15),
    )
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


class TemplateMetadata(Model):
    """Labels and annotations added to every engine pod."""

    labels: dict[str, Annotated[str, Field(max_length=MAX_LABEL_VALUE_LENGTH)]] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description="Labels added to every engine pod (the operator's own keys win).",
    )
    annotations: dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_LENGTH)]] = Field(
        default_factory=dict, max_length=MAX_ANNOTATIONS, description="Annotations added to every engine pod."
    )


MAX_VARIANTS = 4


class PrecisionVariant(Model):
    """One precision the fleet serves, on replicas of its own."""

    name: str = Field(
        min_length=1,
        max_length=20,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="PrecisionVariant name, e.g. fp16 or int8; its engines serve the model as <model.name>-<name>.",
    )
    precision: Precision = Field(description="bf16, fp16, or int8 (ModelSlim-quantized weights).")
    model: str | None = Field(
        default=None,
        max_length=MAX_PATH_LENGTH,
        pattern=r"^/",
        description="Weights path of this variant inside the engine container (e.g. W8A8 weights for int8); "
        "default: spec.model.path.",
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
