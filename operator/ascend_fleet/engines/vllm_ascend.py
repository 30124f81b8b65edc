"""vllm-ascend: vLLM with the Ascend platform plugin, started as ``vllm serve``.

The flags are vLLM's own spellings, checked by ``make test-engines`` with vLLM's parser at the default
images' version.
"""

from __future__ import annotations

import json

from .base import (
    SHORT_REQUEST_FIRST,
    CompilationFacts,
    Dialect,
    EngineFacts,
    EngineRenderer,
    Flag,
    KvConnector,
    KvTransfer,
    Metrics,
    Rank,
    Release,
    Spelling,
    Version,
    compilation_problems,
    format_version,
    fraction,
    shared_flags,
)
from .inputs import EngineLayout, EngineSpec

RAY_PORT = 6379  # Ray GCS on the leader of a multi-pod vLLM replica
MASTER_PORT = 29500  # torch.distributed rendezvous on the leader of a natively launched multi-pod replica
# A Ray replica's shell scripts hold no value from the spec: the serve argv comes as "$@", the leader's
# address from the environment (LEADER_ADDRESS, which the renderer sets in every multi-pod pod), both quoted.
RAY_HEAD_SCRIPT = f'ray start --head --port={RAY_PORT} && exec "$@"'
RAY_WORKER_SCRIPT = f'exec ray start --address="${{LEADER_ADDRESS}}:{RAY_PORT}" --block'

VLLM_ASCEND_TAG = "v0.23.0.post1"
# Versions from which a generated flag exists (the engine's own parser in tests/engines checks the defaults).
NATIVE_MULTI_NODE: Version = (0, 23, 0)  # --nnodes/--node-rank/--master-addr/--headless
# The newest vllm-ascend whose source was read for short_request_first_config (0.11.0, 0.13.0, 0.18.0, 0.23.0: none
# reads it; 0.11.0 had an ascend_scheduler_config instead): images up to here get a warning, newer ones are trusted.
SHORT_REQUEST_FIRST_CHECKED: Version = (0, 23, 0)

# Prefill/decode disaggregation (vllm-ascend's kv_transfer registry, its P/D tutorial and its Mooncake connector):
# the connectors it registers, from the first release read that has them; the connector's own transport
# (AscendDirectTransport) takes ports at random in [20000, 20000 + 1000 x NPUs per node), so kv_port lies above.
MOONCAKE = "MooncakeConnectorV1"
VLLM_KV_TRANSFER = KvTransfer(
    connectors=(
        # Decode pulls from prefill; its worker refuses prefill tp_size < decode tp_size and decode pp_size > 1.
        KvConnector(MOONCAKE, (0, 11, 0), prefill_tensor_at_least_decode=True, decode_single_stage=True),
        KvConnector("MooncakeLayerwiseConnector", (0, 11, 0)),  # prefill pushes layer by layer
        KvConnector("AscendStoreConnector", (0, 13, 0)),  # through a KV pool (a Mooncake store)
    ),
    default_connector={"ascend910b": MOONCAKE, "ascend910_93": MOONCAKE},
    port_name="kv_port",
    reserved_base=20000,
    reserved_per_npu=1000,
    port_per_npu=True,
)
# HCCL's buffer (MB) in vllm-ascend's P/D recipe: smaller on prefill, larger on decode.
HCCL_BUFFSIZE = {"prefill": "256", "decode": "600"}
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}

# spec.engine.compilation (vLLM 0.23.0's vllm/config/compilation.py, CompilationConfig and PassConfig, and
# vllm/engine/arg_utils.py; the same keys in 0.32.0): graphMode eager is --enforce-eager (no torch.compile, no
# graphs), the others CompilationConfig.cudagraph_mode, which vllm-ascend runs as ACL graphs.
CUDAGRAPH_MODE = {"piecewise": "PIECEWISE", "fullDecodeOnly": "FULL_DECODE_ONLY"}
VLLM_COMPILATION = CompilationFacts(
    since=(0, 23, 0),
    source="vLLM's --compilation-config keys cudagraph_mode, max_cudagraph_capture_size and pass_config",
    graph_modes=("eager", *CUDAGRAPH_MODE),
    # PassConfig's fusions of vLLM's own custom ops that 0.23.0 and 0.32.0 both have and that no platform check
    # turns off (the others are CUDA- or ROCm-only, fuse_allreduce_rms is FlashInfer's, and sequence
    # parallelism changes the layout).
    fusion={
        "normQuant": "fuse_norm_quant",
        "actQuant": "fuse_act_quant",
        "attnQuant": "fuse_attn_quant",
    },
    cache_env="VLLM_CACHE_ROOT",  # vllm/envs.py; the torch.compile cache is its torch_compile_cache folder
    # What sets graphs, capture sizes or passes beside the JSON: --max-cudagraph-capture-size next to the JSON
    # key of the same name is even refused at start ("mutually exclusive"); -O/--optimization-level fills in
    # defaults for them.
    flags=(
        "--compilation-config",
        "--enforce-eager",
        "--no-enforce-eager",
        "--cudagraph-capture-sizes",
        "--max-cudagraph-capture-size",
        "--optimization-level",
    ),
)

# vLLM's inter-token latency buckets, which its per-request time per output token shares (vllm/v1/metrics/buckets.py,
# 0.32.0).
_INTER_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                        20.0, 40.0, 80.0)  # fmt: skip

# vLLM's request latency buckets, which its end-to-end and queue-time histograms share.
_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                    240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip

VLLM_ASCEND_FACTS = EngineFacts(
    type="vllm-ascend",
    label="vLLM",
    default_port=8000,
    # vllm-ascend supports Atlas A2 (910B), A3 (910_93) and 300I inference cards; the 910A (Atlas 800
    # training servers of the first generation) is not among them.
    chips=("ascend910b", "ascend910_93"),
    chip_support="vllm-ascend supports Atlas A2 (ascend910b), Atlas A3 (ascend910_93) and Atlas 300I only",
    releases=(
        Release(f"quay.io/ascend/vllm-ascend:{VLLM_ASCEND_TAG}", "0.23.0", "9.1.0", ("ascend910b",)),
        Release(f"quay.io/ascend/vllm-ascend:{VLLM_ASCEND_TAG}-a3", "0.23.0", "9.1.0", ("ascend910_93",)),
    ),
    metrics=Metrics(
        queue_depth="vllm:num_requests_waiting",
        running_requests="vllm:num_requests_running",
        kv_cache_usage="vllm:kv_cache_usage_perc",
        ttft_histogram="vllm:time_to_first_token_seconds",
        queue_time_histogram="vllm:request_queue_time_seconds",
        e2e_latency_histogram="vllm:e2e_request_latency_seconds",
        # Each finished request's decode time over its output tokens after the first (vLLM 0.11 and later;
        # vllm/v1/metrics/loggers.py, 0.32.0).
        tpot_histogram="vllm:request_time_per_output_token_seconds",
    ),
    spelling=Spelling("ascend", "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len"),
    aliases={
        "--tensor-parallel-size": ("-tp",),
        "--pipeline-parallel-size": ("-pp",),
        "--quantization": ("-q",),
        "--nnodes": ("-n",),
        "--node-rank": ("-r",),
        "--prefill-context-parallel-size": ("-pcp",),
        "--data-parallel-size": ("-dp",),
        "--data-parallel-size-local": ("-dpl",),
        "--data-parallel-rank": ("-dpn",),
        "--data-parallel-start-rank": ("-dpr",),
        "--data-parallel-address": ("-dpa",),
        "--data-parallel-rpc-port": ("-dpp",),
        "--compilation-config": ("-cc",),
        "--optimization-level": ("-O",),
    },
    # vLLM 0.23's parser; world size = tensor x pipeline x prefill context parallel, per data-parallel rank.
    layout_flags=(
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--prefill-context-parallel-size",
        "--data-parallel-size",
        "--data-parallel-size-local",
        "--data-parallel-rank",
        "--data-parallel-start-rank",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--headless",
        "--distributed-executor-backend",
    ),
    underscores=True,
    compilation=VLLM_COMPILATION,
    dotted=True,
    joined=("-O",),
    tune_backend="vllm",
    features=frozenset({SHORT_REQUEST_FIRST}),
    kv_transfer=VLLM_KV_TRANSFER,
    dialect=Dialect(
        command_word="vllm",
        metric_prefix="vllm:",
        series_labels=("engine",),
        ttft_buckets=(
            0.001,
            0.005,
            0.01,
            0.02,
            0.04,
            0.06,
            0.08,
            0.1,
            0.25,
            0.5,
            0.75,
            1.0,
            2.5,
            5.0,
            7.5,
            10.0,
            20.0,
            40.0,
            80.0,
            160.0,
            640.0,
            2560.0,
        ),  # fmt: skip
        e2e_buckets=_LATENCY_BUCKETS,
        queue_buckets=_LATENCY_BUCKETS,
        tpot_buckets=_INTER_TOKEN_BUCKETS,
        tpot_per_token=False,
        finished_requests="request_success",
        finished_reason=True,
        aborted_requests=None,
        cache_config_info=True,
        error_at_top=False,
        max_queued_flag=None,
        priority_flag=("--scheduling-policy", "priority"),
        low_priority_first_flag=None,
    ),
)


def multi_node_mode(spec: EngineSpec) -> str:
    """How a multi-pod replica starts: ``engine.multiNode``, else native where the image's vLLM has it."""
    if spec.engine.multi_node:
        return spec.engine.multi_node
    version = VLLM_ASCEND_FACTS.image_version(spec.image() or "")
    return "native" if version >= NATIVE_MULTI_NODE else "ray"


def short_request_first_config(spec: EngineSpec) -> str:
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


def compilation_config_flags(spec: EngineSpec) -> list[Flag]:
    """spec.engine.compilation: ``--enforce-eager``, or ``--compilation-config`` with the keys it sets."""
    compilation = spec.engine.compilation
    if compilation is None:
        return []
    source = "spec.engine.compilation"
    if compilation.graph_mode == "eager":
        return [Flag("--enforce-eager", None, source)]
    config: dict[str, object] = {}
    if compilation.graph_mode is not None:
        config["cudagraph_mode"] = CUDAGRAPH_MODE[compilation.graph_mode]
    if compilation.max_capture_batch_size is not None:
        config["max_cudagraph_capture_size"] = compilation.max_capture_batch_size
    if compilation.fusion:
        config["pass_config"] = {VLLM_COMPILATION.fusion[name]: True for name in compilation.fusion}
    if not config:
        return []
    return [Flag("--compilation-config", json.dumps(config, separators=(",", ":")), source)]


def kv_transfer_config(spec: EngineSpec, at: Rank) -> str:
    """``--kv-transfer-config``: the connector, this instance's role, port and engine id, and both roles' sizes.

    ``dp_size`` is each instance's own data-parallel size, which is 1: every replica is an engine of its own.
    """
    split = spec.disaggregation
    assert split is not None and at.role is not None
    sizes = {}
    for role, settings in (("prefill", split.prefill), ("decode", split.decode)):
        sizes[role] = {"dp_size": 1, "tp_size": settings.parallelism.tensor}
        if settings.parallelism.pipeline > 1:
            sizes[role]["pp_size"] = settings.parallelism.pipeline
    config = {
        "kv_connector": split.kv_transfer.connector,
        "kv_role": KV_ROLE[at.role],
        "kv_port": split.kv_transfer.port,
        "engine_id": at.engine_id,
        "kv_connector_extra_config": sizes,
    }
    return json.dumps(config, separators=(",", ":"))


class VllmAscend(EngineRenderer):
    """``vllm serve``, or Ray on every pod of a multi-pod replica where the image's vLLM has no native mode."""

    facts = VLLM_ASCEND_FACTS

    def flags(self, spec: EngineSpec, layout: EngineLayout, at: Rank) -> list[Flag]:
        """vLLM's flags for this pod, before the user's own args."""
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
                fraction(memory.static_fraction + memory.dynamic_fraction),
                "spec.memory.staticFraction + dynamicFraction",
            ),
        ]
        flags += shared_flags(spec, VLLM_ASCEND_FACTS.spelling)
        if spec.batching.chunked_prefill is not None:
            switch = (
                "--enable-chunked-prefill" if spec.batching.chunked_prefill else "--no-enable-chunked-prefill"
            )
            flags.append(Flag(switch, None, "spec.batching.chunkedPrefill"))
        if spec.scheduling.priority:
            # Requests carry `priority`; vLLM serves lower values first.
            flags.append(Flag("--scheduling-policy", "priority", "spec.scheduling.priority"))
        if spec.scheduling.policy == "short-request-first":
            flags.append(
                Flag("--additional-config", short_request_first_config(spec), "spec.scheduling.policy")
            )
        flags += compilation_config_flags(spec)
        if at.role is not None:
            flags.append(Flag("--kv-transfer-config", kv_transfer_config(spec, at), "spec.disaggregation"))
        if layout.multi_pod:
            flags += self._multi_pod_flags(spec, layout, at)
        return flags

    def _multi_pod_flags(self, spec: EngineSpec, layout: EngineLayout, at: Rank) -> list[Flag]:
        if multi_node_mode(spec) == "ray":
            return [Flag("--distributed-executor-backend", "ray", "spec.parallelism (replica spans nodes)")]
        source = "spec.engine.multiNode: native"
        flags = [
            Flag("--nnodes", str(layout.pods_per_replica), source),
            Flag("--node-rank", str(at.rank), "the pod's rank"),
            Flag("--master-addr", "$(LEADER_ADDRESS)", "the replica's leader"),
            Flag("--master-port", str(MASTER_PORT), source),
        ]
        if not at.leader:  # ranks > 0 run engine workers only; the leader serves the API
            flags.append(Flag("--headless", None, "the pod's rank"))
        return flags

    def command(self, spec: EngineSpec, layout: EngineLayout, at: Rank, exporter: bool) -> list[str]:
        """``vllm serve <path> ...``; under Ray, the leader starts the head first and workers join it.

        The shell script is a constant: Kubernetes expands ``$(VAR)`` in command and args before the shell
        reads them, so a value of spec.engine.env referenced from spec.engine.args would become shell code if
        it were written into the script. ``vllm serve``'s argv goes after the script as bash's positional
        parameters (run as ``exec "$@"``), and the leader's address is read from the environment, quoted.
        """
        serve = ["vllm", "serve", spec.model.path, *self.argv(spec, layout, at)]
        if not layout.multi_pod or multi_node_mode(spec) == "native":
            return serve
        if at.leader:
            return ["/bin/bash", "-c", RAY_HEAD_SCRIPT, "bash", *serve]
        return ["/bin/bash", "-c", RAY_WORKER_SCRIPT]

    def env(self, spec: EngineSpec, layout: EngineLayout) -> list[dict]:
        """Ray must leave ASCEND_RT_VISIBLE_DEVICES as the device plugin set it; the compile cache's root."""
        env = []
        if layout.multi_pod and multi_node_mode(spec) == "ray":
            env.append({"name": "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "value": "1"})
        compilation = spec.engine.compilation
        if compilation is not None and compilation.cache_dir:
            env.append({"name": VLLM_COMPILATION.cache_env, "value": compilation.cache_dir})
        return env

    def kv_env(self, spec: EngineSpec, at: Rank, store_host: str) -> list[dict]:
        """HCCL's buffer size for the role, as vllm-ascend's P/D recipe sets it."""
        assert at.role is not None
        return [{"name": "HCCL_BUFFSIZE", "value": HCCL_BUFFSIZE[at.role]}]

    def leader_ports(self, spec: EngineSpec) -> list[dict]:
        """Ray's GCS, or torch.distributed's rendezvous for a native launch."""
        if multi_node_mode(spec) == "ray":
            return [{"name": "ray-gcs", "containerPort": RAY_PORT, "protocol": "TCP"}]
        return [{"name": "dist-init", "containerPort": MASTER_PORT, "protocol": "TCP"}]

    def version_warnings(self, spec: EngineSpec, image: str) -> list[str]:
        """Short-request-first: rendered, but no vllm-ascend release reads the key (checked up to 0.23.0)."""
        if (
            spec.scheduling.policy != "short-request-first"
            or VLLM_ASCEND_FACTS.image_version(image) > SHORT_REQUEST_FIRST_CHECKED
        ):
            return []
        return [
            f"spec.scheduling.policy: short-request-first is rendered as --additional-config "
            f"scheduler_config.short_request_first_config, which no vllm-ascend release up to "
            f"{format_version(SHORT_REQUEST_FIRST_CHECKED)} reads (image {image}); the engine starts and serves "
            "first come, first served; use the routing classes (spec.routing) to order requests by length"
        ]

    def version_problems(self, spec: EngineSpec, layout: EngineLayout, image: str) -> list[str]:
        """A native multi-pod launch, or spec.engine.compilation, on an image whose vLLM predates it."""
        version = VLLM_ASCEND_FACTS.image_version(image)
        problems = compilation_problems(VLLM_ASCEND_FACTS, spec, image)
        if layout.multi_pod and spec.engine.multi_node == "native" and version < NATIVE_MULTI_NODE:
            problems.append(
                f"spec.engine.multiNode: native needs vLLM {format_version(NATIVE_MULTI_NODE)} "
                f"or newer (--nnodes/--headless), and image {image} carries vLLM {format_version(version)}; "
                "use multiNode: ray or a newer image"
            )
        return problems
