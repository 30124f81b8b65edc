"""Engine command lines and environment for vllm-ascend and SGLang (flags as spelled in ENGINES.md)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..api.v1alpha1 import AscendInferenceSpec
from ..layout import Layout

EXPORTER_PORT = 9410  # the engine exporter's /metrics; container port name "npu-metrics"
RAY_PORT = 6379  # Ray GCS on the leader of a multi-pod vLLM replica
SGLANG_DIST_PORT = 5000  # torch.distributed rendezvous on the leader of a multi-pod SGLang replica
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
        return _vllm_flags(spec, layout)
    return _sglang_flags(spec, layout, at)


def _vllm_flags(spec: AscendInferenceSpec, layout: Layout) -> list[Flag]:
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
        switch = "--enable-chunked-prefill" if spec.batching.chunked_prefill else "--no-enable-chunked-prefill"
        flags.append(Flag(switch, None, "spec.batching.chunkedPrefill"))
    if spec.scheduling.priority:
        flags.append(Flag("--scheduling-policy", "priority", "spec.scheduling.priority"))
    if layout.multi_pod:
        flags.append(Flag("--distributed-executor-backend", "ray", "spec.parallelism (replica spans nodes)"))
    return flags


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
        flags.append(Flag("--enable-priority-scheduling", None, "spec.scheduling.priority"))
        flags.append(Flag("--schedule-policy", "priority", "spec.scheduling.priority"))
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
SGLANG_SPELLING = Spelling("modelslim", "--max-running-requests", "--max-prefill-tokens", "--context-length")


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
        if not layout.multi_pod:
            return serve
        if at.leader:
            script = f"ray start --head --port={RAY_PORT} && exec {shlex.join(serve)}"
        else:
            script = f"exec ray start --address=$(LEADER_ADDRESS):{RAY_PORT} --block"
        return ["/bin/bash", "-c", script]
    launcher = "ascend_fleet.exporter.sglang" if spec.engine.exporter else "sglang.launch_server"
    return ["python3", "-m", launcher, *tokens]


def engine_env(spec: AscendInferenceSpec, layout: Layout, name: str, at: Rank) -> list[dict]:
    """Generated environment; the user's spec.engine.env entries with the same name replace these."""
    env: list[dict] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "TASK_QUEUE_ENABLE", "value": "1"},
    ]
    if spec.memory.expandable_segments:
        env.append({"name": "PYTORCH_NPU_ALLOC_CONF", "value": "expandable_segments:True"})
    if spec.engine.exporter:
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
        if spec.engine.type == "vllm-ascend":
            env.append({"name": "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "value": "1"})
    if spec.engine.type == "sglang":
        env.append({"name": "SGLANG_SET_CPU_AFFINITY", "value": "1"})
    user = [e.model_dump(by_alias=True, exclude_none=True) for e in spec.engine.env]
    overridden = {e["name"] for e in user}
    return [e for e in env if e["name"] not in overridden] + user


def arg_conflicts(spec: AscendInferenceSpec, layout: Layout) -> list[str]:
    """User args that repeat a generated flag: ambiguous, so reported rather than silently overridden."""
    generated = {f.name: f for f in engine_flags(spec, layout, Rank(0, 0, layout.pods_per_replica))}
    problems = []
    for arg in spec.engine.args:
        flag = arg.split("=", 1)[0]
        if flag in generated:
            source = generated[flag]
            shown = f"{source.name} {source.value}" if source.value is not None else source.name
            problems.append(
                f"spec.engine.args: {arg!r} repeats the generated {shown!r} (from {source.source}); "
                f"set it there instead of in args"
            )
    return problems
