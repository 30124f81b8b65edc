"""Engine command lines and environment for vllm-ascend and SGLang.

The flags are the engines' own spellings, checked by ``make test-engines``, which runs every generated argv
through vLLM's and SGLang's own argument parsers at the versions of the default images.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from ..api import images
from ..api.v1alpha1 import AscendInferenceSpec
from ..layout import Layout

EXPORTER_PORT = 9410  # the engine exporter's /metrics; container port name "npu-metrics"
RAY_PORT = 6379  # Ray GCS on the leader of a multi-pod vLLM replica
SGLANG_DIST_PORT = 5000  # torch.distributed rendezvous on the leader of a multi-pod SGLang replica
VLLM_MASTER_PORT = (
    29500  # torch.distributed rendezvous on the leader of a natively launched multi-pod vLLM replica
)
VLLM_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Rank:
    """Where one pod sits in its replica's gang."""

    replica: int
    rank: int
    pods: int

    @property
    def leader(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class Flag:
    """One generated flag and the spec field it comes from (for conflict messages)."""

    name: str
    value: str | None
    source: str

    def tokens(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value]


def engine_flags(spec: AscendInferenceSpec, layout: Layout, at: Rank) -> list[Flag]:
    """The flags the engine gets for this pod, before the user's own args."""
    if spec.engine.type == "vllm-ascend":
        return _vllm_flags(spec, layout, at)
    return _sglang_flags(spec, layout, at)


def _vllm_flags(spec: AscendInferenceSpec, layout: Layout, at: Rank) -> list[Flag]:
    memory = spec.memory
    flags = [
        Flag("--served-model-name", spec.model.name, "spec.model.name"),
        Flag("--host", "0.0.0.0", "the operator"),
        Flag("--port", str(spec.engine.port), "spec.engine.port"),
        Flag("--tensor-parallel-size", str(layout.tensor), "spec.parallelism.tensor"),
        Flag("--pipeline-parallel-size", str(layout.pipeline), "spec.parallelism.pipeline"),
        # vLLM gets the static and dynamic pools; the reserve is never handed to the engine.
        Flag(
            "--gpu-memory-utilization",
            _fraction(memory.static_fraction + memory.dynamic_fraction),
            "spec.memory.staticFraction + dynamicFraction",
        ),
    ]
    flags += _shared_flags(spec, VLLM_SPELLING)
    if spec.batching.chunked_prefill is not None:
        switch = (
            "--enable-chunked-prefill" if spec.batching.chunked_prefill else "--no-enable-chunked-prefill"
        )
        flags.append(Flag(switch, None, "spec.batching.chunkedPrefill"))
    if spec.scheduling.priority:
        # Requests carry `priority`; vLLM serves lower values first.
        flags.append(Flag("--scheduling-policy", "priority", "spec.scheduling.priority"))
    if spec.scheduling.policy == "short-request-first":
        flags.append(Flag("--additional-config", short_request_first_config(spec), "spec.scheduling.policy"))
    if layout.multi_pod and multi_node_mode(spec) == "ray":
        flags.append(Flag("--distributed-executor-backend", "ray", "spec.parallelism (replica spans nodes)"))
    elif layout.multi_pod:
        source = "spec.engine.multiNode: native"
        flags += [
            Flag("--nnodes", str(layout.pods_per_replica), source),
            Flag("--node-rank", str(at.rank), "the pod's rank"),
            Flag("--master-addr", "$(LEADER_ADDRESS)", "the replica's leader"),
            Flag("--master-port", str(VLLM_MASTER_PORT), source),
        ]
        if not at.leader:  # ranks > 0 run engine workers only; the leader serves the API
            flags.append(Flag("--headless", None, "the pod's rank"))
    return flags


def multi_node_mode(spec: AscendInferenceSpec) -> str:
    """How a multi-pod vLLM replica starts: ``engine.multiNode``, else native where the image's vLLM has it."""
    if spec.engine.multi_node:
        return spec.engine.multi_node
    version = images.image_version(spec.engine.type, spec.image() or "")
    return "native" if version >= images.VLLM_NATIVE_MULTI_NODE else "ray"


def exporter_enabled(spec: AscendInferenceSpec) -> bool:
    """``engine.exporter``, where the image can run it: the upstream images do not contain the exporter."""
    return spec.engine.exporter and images.has_exporter(spec.image() or "")


def short_request_first_config(spec: AscendInferenceSpec) -> str:
    """vllm-ascend's ``--additional-config`` for its short-request-first scheduler (threshold in prompt tokens)."""
    scheduling = spec.scheduling
    config = {
        "scheduler_config": {
            "short_request_first_config": {
                "enabled": True,
                "threshold": scheduling.short_request_tokens,
                "long_max_wait_ms": round(scheduling.max_wait * 1000),
            }
        }
    }
    return json.dumps(config, separators=(",", ":"))


def _sglang_flags(spec: AscendInferenceSpec, layout: Layout, at: Rank) -> list[Flag]:
    flags = [
        Flag("--model-path", spec.model.path, "spec.model.path"),
        Flag("--served-model-name", spec.model.name, "spec.model.name"),
        Flag("--host", "0.0.0.0", "the operator"),
        Flag("--port", str(spec.engine.port), "spec.engine.port"),
        Flag("--tp-size", str(layout.tensor), "spec.parallelism.tensor"),
        Flag("--pp-size", str(layout.pipeline), "spec.parallelism.pipeline"),
        Flag("--device", "npu", "spec.hardware"),
        Flag("--attention-backend", "ascend", "spec.hardware"),
        # SGLang's static pool holds weights and KV cache; the dynamic share stays free for activations.
        Flag("--mem-fraction-static", _fraction(spec.memory.static_fraction), "spec.memory.staticFraction"),
        Flag("--enable-metrics", None, "the operator"),
    ]
    flags += _shared_flags(spec, SGLANG_SPELLING) + _sglang_adaptive_flags(spec)
    if spec.scheduling.priority:
        # SGLang has no "priority" policy: priority scheduling runs on fcfs (or lof), and serves higher
        # values first unless told otherwise; lower-first matches vLLM, so one client works with both.
        flags += [
            Flag("--enable-priority-scheduling", None, "spec.scheduling.priority"),
            Flag("--schedule-policy", "fcfs", "spec.scheduling.priority"),
            Flag("--schedule-low-priority-values-first", None, "spec.scheduling.priority"),
        ]
    if layout.multi_pod:
        flags += [
            Flag("--nnodes", str(layout.pods_per_replica), "spec.parallelism (replica spans nodes)"),
            Flag("--node-rank", str(at.rank), "the pod's rank"),
            Flag("--dist-init-addr", f"$(LEADER_ADDRESS):{SGLANG_DIST_PORT}", "the replica's leader"),
        ]
    return flags


def _sglang_adaptive_flags(spec: AscendInferenceSpec) -> list[Flag]:
    """SGLang's own adaptive batching knobs: chunked prefill off, and the prefill delayer."""
    flags = []
    if spec.batching.chunked_prefill is False:  # on by default; -1 is SGLang's spelling of off
        flags.append(Flag("--chunked-prefill-size", "-1", "spec.batching.chunkedPrefill"))
    delayer = spec.batching.prefill_delayer
    if delayer is not None and delayer.enabled:
        source = "spec.batching.prefillDelayer"
        flags.append(Flag("--enable-prefill-delayer", None, source))
        if delayer.max_delay_ms is not None:
            flags.append(Flag("--prefill-delayer-max-delay-ms", f"{delayer.max_delay_ms:g}", source))
        if delayer.queue_min_ratio is not None:
            flags.append(Flag("--prefill-delayer-queue-min-ratio", f"{delayer.queue_min_ratio:g}", source))
    return flags


@dataclass(frozen=True)
class Spelling:
    """How one engine spells the settings both engines have."""

    quantization: str  # the --quantization value for ModelSlim int8 weights
    max_batch_size: str
    max_batch_tokens: str
    max_model_len: str


VLLM_SPELLING = Spelling("ascend", "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len")
# SGLang's per-step token cap is --chunked-prefill-size (--max-prefill-tokens is not a per-step bound).
SGLANG_SPELLING = Spelling(
    "modelslim", "--max-running-requests", "--chunked-prefill-size", "--context-length"
)


def _shared_flags(spec: AscendInferenceSpec, spelling: Spelling) -> list[Flag]:
    """Precision, batching limits and context length, in each engine's spelling."""
    if spec.precision == "int8":
        flags = [Flag("--quantization", spelling.quantization, "spec.precision")]
    else:
        flags = [Flag("--dtype", VLLM_DTYPE[spec.precision], "spec.precision")]
    optional = (
        (spelling.max_batch_size, spec.batching.max_batch_size, "spec.batching.maxBatchSize"),
        (spelling.max_batch_tokens, spec.batching.max_batch_tokens, "spec.batching.maxBatchTokens"),
        (spelling.max_model_len, spec.model.max_model_len, "spec.model.maxModelLen"),
    )
    flags += [Flag(name, str(value), source) for name, value, source in optional if value]
    return flags


def _fraction(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value < 1 else "1.0"


def command(spec: AscendInferenceSpec, layout: Layout, at: Rank) -> list[str]:
    """The container command (argv) for one pod."""
    tokens = [t for flag in engine_flags(spec, layout, at) for t in flag.tokens()] + list(spec.engine.args)
    if spec.engine.type == "vllm-ascend":
        serve = ["vllm", "serve", spec.model.path, *tokens]
        if not layout.multi_pod or multi_node_mode(spec) == "native":
            return serve
        if at.leader:
            script = f"ray start --head --port={RAY_PORT} && exec {shlex.join(serve)}"
        else:
            script = f"exec ray start --address=$(LEADER_ADDRESS):{RAY_PORT} --block"
        return ["/bin/bash", "-c", script]
    return ["python3", "-m", sglang_launcher(spec), *tokens]


def sglang_launcher(spec: AscendInferenceSpec) -> str:
    """SGLang's own launcher, unless the exporter is on and the image's SGLang has no plugin group to load it."""
    if not exporter_enabled(spec):
        return "sglang.launch_server"
    version = images.image_version(spec.engine.type, spec.image() or "")
    return "sglang.launch_server" if version >= images.SGLANG_PLUGINS else "ascend_fleet.exporter.sglang"


def engine_env(spec: AscendInferenceSpec, layout: Layout, name: str, at: Rank) -> list[dict]:
    """Generated environment; a spec.engine.env entry with the same name replaces one in place.

    Kubernetes expands ``$(VAR)`` only from entries listed earlier, so a replaced variable keeps its
    position (later entries such as ``HCCL_IF_IP=$(POD_IP)`` still expand) and new ones go last.
    """
    env: list[dict] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "TASK_QUEUE_ENABLE", "value": "1"},
        # Explicit both ways: vllm-ascend turns expandable segments on itself when the variable is unset.
        {
            "name": "PYTORCH_NPU_ALLOC_CONF",
            "value": f"expandable_segments:{'True' if spec.memory.expandable_segments else 'False'}",
        },
    ]
    if exporter_enabled(spec):
        env += [
            {"name": "ASCEND_FLEET_EXPORTER", "value": "1"},
            {"name": "ASCEND_FLEET_EXPORTER_PORT", "value": str(EXPORTER_PORT)},
        ]
    if layout.multi_pod:
        interface = spec.hardware.network_interface
        env += [
            {"name": "LEADER_ADDRESS", "value": f"{name}-{at.replica}.{name}-pods.$(POD_NAMESPACE).svc"},
            {"name": "HCCL_IF_IP", "value": "$(POD_IP)"},
            {"name": "HCCL_SOCKET_IFNAME", "value": interface},
            {"name": "GLOO_SOCKET_IFNAME", "value": interface},
            {"name": "TP_SOCKET_IFNAME", "value": interface},
        ]
        if spec.engine.type == "vllm-ascend" and multi_node_mode(spec) == "ray":
            env.append({"name": "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "value": "1"})
    if spec.engine.type == "sglang":
        env.append({"name": "SGLANG_SET_CPU_AFFINITY", "value": "1"})
    user = {e.name: e.model_dump(by_alias=True, exclude_none=True) for e in spec.engine.env}
    merged = [user.pop(e["name"], e) for e in env]
    return merged + list(user.values())


# Other spellings each engine's own parser accepts for a generated flag (``make test-engines`` checks this
# table against the parsers). Both parsers also take ``--flag=value`` and any unambiguous prefix of a long
# option; vLLM's also reads ``--flag_name`` as ``--flag-name``.
ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm-ascend": {
        "--tensor-parallel-size": ("-tp",),
        "--pipeline-parallel-size": ("-pp",),
        "--quantization": ("-q",),
        "--nnodes": ("-n",),
        "--node-rank": ("-r",),
    },
    "sglang": {
        "--model-path": ("--model",),
        "--tp-size": ("--tensor-parallel-size",),
        "--pp-size": ("--pipeline-parallel-size",),
        "--dist-init-addr": ("--nccl-init-addr",),
    },
}
UNDERSCORES: dict[str, bool] = {"vllm-ascend": True, "sglang": False}


def _spelled(engine: str, arg: str) -> str:
    """The option an argument names, with the engine's underscore rule applied (``--a_b=1`` -> ``--a-b``)."""
    option = arg.split("=", 1)[0]
    if UNDERSCORES[engine] and option.startswith("--"):
        option = "--" + option[2:].replace("_", "-")
    return option


def _generated_option(engine: str, option: str, generated: dict[str, Flag]) -> Flag | None:
    """The generated flag an option means: its own name, an alias, or an unambiguous prefix of a long name."""
    if option in generated:
        return generated[option]
    for name, aliases in ALIASES[engine].items():
        if option in aliases and name in generated:
            return generated[name]
    if option.startswith("--") and len(option) > 3:
        spellings = [
            (s, f)
            for f in generated.values()
            for s in (f.name, *ALIASES[engine].get(f.name, ()))
            if s.startswith("--")
        ]
        matches = {f.name: f for s, f in spellings if s.startswith(option)}
        if len(matches) == 1:
            return next(iter(matches.values()))
    return None


def arg_conflicts(spec: AscendInferenceSpec, layout: Layout) -> list[str]:
    """User args that repeat a generated flag, in any spelling the engine accepts: reported, never overridden."""
    engine = spec.engine.type
    generated: dict[str, Flag] = {}
    for rank in range(layout.pods_per_replica):  # workers may get flags the leader does not (--headless)
        for flag in engine_flags(spec, layout, Rank(0, rank, layout.pods_per_replica)):
            generated.setdefault(flag.name, flag)
    problems = []
    for arg in spec.engine.args:
        if not arg.startswith("-"):
            continue
        source = _generated_option(engine, _spelled(engine, arg), generated)
        if source is not None:
            shown = f"{source.name} {source.value}" if source.value is not None else source.name
            problems.append(
                f"spec.engine.args: {arg!r} repeats the generated {shown!r} (from {source.source}); "
                f"set it there instead of in args"
            )
    return problems


def version_problems(spec: AscendInferenceSpec, layout: Layout) -> list[str]:
    """Settings the image's engine version cannot run, each with what would fit."""
    image = spec.image()
    if image is None:
        return []
    version = images.image_version(spec.engine.type, image)
    shown = images.format_version(version)
    problems = []
    if spec.engine.type == "sglang" and spec.precision == "int8" and version < images.SGLANG_MODELSLIM:
        problems.append(
            f"spec.precision: int8 needs SGLang's --quantization modelslim, which SGLang {shown} (image {image}) "
            f"lacks; use an image with SGLang {images.format_version(images.SGLANG_MODELSLIM)} or newer, "
            "or precision bf16"
        )
    if (
        spec.engine.type == "vllm-ascend"
        and layout.multi_pod
        and spec.engine.multi_node == "native"
        and version < images.VLLM_NATIVE_MULTI_NODE
    ):
        problems.append(
            f"spec.engine.multiNode: native needs vLLM {images.format_version(images.VLLM_NATIVE_MULTI_NODE)} "
            f"or newer (--nnodes/--headless), and image {image} carries vLLM {shown}; use multiNode: ray "
            "or a newer image"
        )
    return problems
