"""SGLang, started as ``python3 -m sglang.launch_server``.

The flags are SGLang's own spellings, checked by ``make test-engines`` with SGLang's ``prepare_server_args``
and ``check_server_args`` at the default images' version.
"""

from __future__ import annotations

from .base import (
    PREFILL_DELAYER,
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

DIST_PORT = 5000  # torch.distributed rendezvous on the leader of a multi-pod replica
LAUNCHER = "sglang.launch_server"
# The project's wrapper that arms the exporter where the image's SGLang cannot load it as a plugin.
EXPORTER_LAUNCHER = "ascend_fleet_exporter.sglang"

SGLANG_TAG = "v0.5.14-cann9.0.0"
# Versions from which a generated flag exists (the engine's own parser in tests/engines checks the defaults).
MODELSLIM: Version = (0, 5, 7)  # --quantization modelslim
PLUGINS: Version = (0, 5, 14)  # the sglang.srt.plugins entry point group (absent up to 0.5.10)
PREFILL_DELAYER_FLAG: Version = (0, 5, 8)  # --enable-prefill-delayer (absent in 0.5.7's parser)
PREFILL_DELAYER_KNOBS: Version = (
    0,
    5,
    12,
)  # --prefill-delayer-max-delay-ms, --prefill-delayer-queue-min-ratio

# Prefill/decode disaggregation (SGLang's server arguments and its Ascend docs): the ``ascend`` transfer backend
# over MemFabric, whose config store the first prefill leader's bootstrap server creates at ASCEND_MF_STORE_URL;
# the bootstrap server listens on --disaggregation-bootstrap-port (SGLang's default 8998).
ASCEND_BACKEND = "ascend"
BOOTSTRAP_PORT = 8998
MF_STORE_PORT = 24666  # the store's port in SGLang's own Ascend P/D tests
SGLANG_KV_TRANSFER = KvTransfer(
    connectors=(KvConnector(ASCEND_BACKEND, (0, 5, 0)),),
    default_connector={
        "ascend910a": ASCEND_BACKEND,
        "ascend910b": ASCEND_BACKEND,
        "ascend910_93": ASCEND_BACKEND,
    },
    port_name="--disaggregation-bootstrap-port",
    fixed_default_port=BOOTSTRAP_PORT,
)

# spec.engine.compilation (SGLang 0.5.14's sglang/srt/server_args.py and model_executor/cuda_graph_config.py):
# graphs per phase, decode and prefill, each with a backend (full is decode-only; tc_piecewise is torch.compile
# with piecewise graphs); the capture size is the decode phase's. SGLang's compilation has no named fusion passes.
# Piecewise is a prefill backend only: a decode tc_piecewise falls back to full graphs (runner_backend/utils.py),
# and SGLang turns prefill tc_piecewise off on NPUs unless the flag sets it.
GRAPH_BACKENDS = {
    "eager": ("disabled", "disabled"),  # (decode, prefill)
    "piecewise": ("full", "tc_piecewise"),
    "fullDecodeOnly": ("full", "disabled"),
}
SGLANG_COMPILATION = CompilationFacts(
    since=(0, 5, 14),
    source="SGLang's --cuda-graph-backend-decode/-prefill and --cuda-graph-max-bs-decode",
    graph_modes=tuple(GRAPH_BACKENDS),
    fusion={},
    # sglang/srt/environ.py; its torch.compile cache is the torch_compile_cache folder under it.
    cache_env="SGLANG_CACHE_DIR",
    # The JSON form, the per-phase flags and their deprecated spellings, which set the same per-phase settings.
    flags=(
        "--cuda-graph-config",
        "--cuda-graph-backend-decode",
        "--cuda-graph-backend-prefill",
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-max-bs-prefill",
        "--cuda-graph-bs-decode",
        "--cuda-graph-bs-prefill",
        "--cuda-graph-max-bs",
        "--cuda-graph-bs",
        "--disable-cuda-graph",
        "--disable-decode-cuda-graph",
        "--disable-prefill-cuda-graph",
        "--enable-breakable-cuda-graph",
        "--disable-piecewise-cuda-graph",
        "--enforce-piecewise-cuda-graph",
        "--piecewise-cuda-graph-tokens",
    ),
)

# Newer SGLang writes each queue gauge once with priority="" (the total) and again per priority value: the
# total alone is selected (older versions have no priority label, which priority="" also matches).
_TOTAL = '{priority=""}'

SGLANG_FACTS = EngineFacts(
    type="sglang",
    label="SGLang",
    default_port=30000,
    chips=("ascend910a", "ascend910b", "ascend910_93"),
    chip_support="SGLang supports Atlas A2 (ascend910b), Atlas A3 (ascend910_93) and, with the A2 build, 910A",
    releases=(
        # SGLang's Ascend docs cover A2 and A3; 910A gets the A2 build (not covered upstream, see docs/engines.md).
        Release(f"lmsysorg/sglang:{SGLANG_TAG}-910b", "0.5.14", "9.0.0", ("ascend910b", "ascend910a")),
        Release(f"lmsysorg/sglang:{SGLANG_TAG}-a3", "0.5.14", "9.0.0", ("ascend910_93",)),
    ),
    metrics=Metrics(
        queue_depth=f"sglang:num_queue_reqs{_TOTAL}",
        running_requests=f"sglang:num_running_reqs{_TOTAL}",
        kv_cache_usage="sglang:token_usage",
        ttft_histogram="sglang:time_to_first_token_seconds",
        queue_time_histogram="sglang:queue_time_seconds",
        e2e_latency_histogram="sglang:e2e_request_latency_seconds",
        # SGLang has no per-request TPOT histogram: its inter-token latency counts every output token at the
        # interval of its step (python/sglang/srt/metrics/collector.py, read in 0.5.5 and a later main).
        tpot_histogram="sglang:inter_token_latency_seconds",
    ),
    # SGLang's per-step token cap is --chunked-prefill-size (--max-prefill-tokens is not a per-step bound).
    spelling=Spelling("modelslim", "--max-running-requests", "--chunked-prefill-size", "--context-length"),
    aliases={
        "--model-path": ("--model",),
        "--tp-size": ("--tensor-parallel-size",),
        "--pp-size": ("--pipeline-parallel-size",),
        "--dist-init-addr": ("--nccl-init-addr",),
        "--dp-size": ("--data-parallel-size",),
    },
    # SGLang 0.5's parser: the sizes and the rendezvous of one engine's ranks, and the P/D role.
    layout_flags=(
        "--tp-size",
        "--pp-size",
        "--dp-size",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--disaggregation-mode",
    ),
    underscores=False,
    compilation=SGLANG_COMPILATION,
    tune_backend="sglang-oai",
    picker_engine="sglang",
    features=frozenset({PREFILL_DELAYER}),
    kv_transfer=SGLANG_KV_TRANSFER,
    dialect=Dialect(
        command_word="sglang",
        metric_prefix="sglang:",
        series_labels=("tp_rank", "pp_rank", "dp_rank"),
        ttft_buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
        e2e_buckets=(
            0.1,
            0.2,
            0.4,
            0.6,
            0.8,
            1,
            2,
            4,
            6,
            8,
            10,
            20,
            40,
            60,
            80,
            100,
            200,
            400,
            600,
            1200,
            1800,
            2400,
        ),  # fmt: skip
        queue_buckets=(
            0.0,
            0.001,
            0.005,
            0.01,
            0.05,
            0.1,
            0.2,
            0.5,
            1,
            2,
            3,
            4,
            5,
            10,
            15,
            20,
            30,
            40,
            50,
            60,
            70,
            80,
            90,
        ),  # fmt: skip
        tpot_buckets=(
            0.002,
            0.004,
            0.006,
            0.008,
            0.010,
            0.015,
            0.020,
            0.025,
            0.030,
            0.035,
            0.040,
            0.060,
            0.080,
            0.100,
            0.200,
            0.400,
            0.600,
            0.800,
            1.000,
            2.000,
            4.000,
            6.000,
            8.000,
        ),  # fmt: skip
        tpot_per_token=True,
        finished_requests="num_requests",
        finished_reason=False,
        aborted_requests="num_aborted_requests",
        cache_config_info=False,
        error_at_top=True,
        max_queued_flag="--max-queued-requests",
        priority_flag=("--enable-priority-scheduling", ""),
        low_priority_first_flag="--schedule-low-priority-values-first",
    ),
)


def launcher(spec: EngineSpec, exporter: bool) -> str:
    """SGLang's own launcher, unless the exporter is on and the image's SGLang has no plugin group to load it."""
    if not exporter:
        return LAUNCHER
    return LAUNCHER if SGLANG_FACTS.image_version(spec.image() or "") >= PLUGINS else EXPORTER_LAUNCHER


def adaptive_flags(spec: EngineSpec) -> list[Flag]:
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


def cuda_graph_flags(spec: EngineSpec) -> list[Flag]:
    """spec.engine.compilation: each phase's graph backend, and the decode phase's largest captured batch."""
    compilation = spec.engine.compilation
    if compilation is None:
        return []
    source = "spec.engine.compilation"
    flags = []
    if compilation.graph_mode is not None:
        decode, prefill = GRAPH_BACKENDS[compilation.graph_mode]
        flags += [
            Flag("--cuda-graph-backend-decode", decode, source),
            Flag("--cuda-graph-backend-prefill", prefill, source),
        ]
    if compilation.max_capture_batch_size is not None:
        flags.append(Flag("--cuda-graph-max-bs-decode", str(compilation.max_capture_batch_size), source))
    return flags


def disaggregation_flags(spec: EngineSpec, at: Rank) -> list[Flag]:
    """The role, the transfer backend and, on prefill, where its bootstrap server listens."""
    split = spec.disaggregation
    assert split is not None and at.role is not None
    source = "spec.disaggregation"
    flags = [
        Flag("--disaggregation-mode", at.role, source),
        Flag(
            "--disaggregation-transfer-backend",
            str(split.kv_transfer.connector),
            "spec.disaggregation.kvTransfer",
        ),
    ]
    if at.role == "prefill":
        flags.append(
            Flag(
                "--disaggregation-bootstrap-port",
                str(split.kv_transfer.port),
                "spec.disaggregation.kvTransfer",
            )
        )
    return flags


class SGLang(EngineRenderer):
    """One ``sglang.launch_server`` per pod; the ranks of a multi-pod replica meet at the leader."""

    facts = SGLANG_FACTS

    def flags(self, spec: EngineSpec, layout: EngineLayout, at: Rank) -> list[Flag]:
        """SGLang's flags for this pod, before the user's own args."""
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
            Flag(
                "--mem-fraction-static", fraction(spec.memory.static_fraction), "spec.memory.staticFraction"
            ),
            Flag("--enable-metrics", None, "the operator"),
        ]
        flags += shared_flags(spec, SGLANG_FACTS.spelling) + adaptive_flags(spec) + cuda_graph_flags(spec)
        if spec.scheduling.priority:
            # SGLang has no "priority" policy: priority scheduling runs on fcfs (or lof), and serves higher
            # values first unless told otherwise; lower-first matches vLLM, so one client works with both.
            flags += [
                Flag("--enable-priority-scheduling", None, "spec.scheduling.priority"),
                Flag("--schedule-policy", "fcfs", "spec.scheduling.priority"),
                Flag("--schedule-low-priority-values-first", None, "spec.scheduling.priority"),
            ]
        if at.role is not None:
            flags += disaggregation_flags(spec, at)
        if layout.multi_pod:
            flags += [
                Flag("--nnodes", str(layout.pods_per_replica), "spec.parallelism (replica spans nodes)"),
                Flag("--node-rank", str(at.rank), "the pod's rank"),
                Flag("--dist-init-addr", f"$(LEADER_ADDRESS):{DIST_PORT}", "the replica's leader"),
            ]
        return flags

    def command(self, spec: EngineSpec, layout: EngineLayout, at: Rank, exporter: bool) -> list[str]:
        """``python3 -m sglang.launch_server ...`` (or the exporter's wrapper on an older image)."""
        return ["python3", "-m", launcher(spec, exporter), *self.argv(spec, layout, at)]

    def env(self, spec: EngineSpec, layout: EngineLayout) -> list[dict]:
        """SGLang pins its scheduler processes to the NPU's CPU cores; the compile cache's root."""
        env = [{"name": "SGLANG_SET_CPU_AFFINITY", "value": "1"}]
        compilation = spec.engine.compilation
        if compilation is not None and compilation.cache_dir:
            env.append({"name": SGLANG_COMPILATION.cache_env, "value": compilation.cache_dir})
        return env

    def kv_env(self, spec: EngineSpec, at: Rank, store_host: str) -> list[dict]:
        """The MemFabric config store of the ``ascend`` backend, on the first prefill leader."""
        return [{"name": "ASCEND_MF_STORE_URL", "value": f"tcp://{store_host}:{MF_STORE_PORT}"}]

    def leader_ports(self, spec: EngineSpec) -> list[dict]:
        """torch.distributed's rendezvous."""
        return [{"name": "dist-init", "containerPort": DIST_PORT, "protocol": "TCP"}]

    def version_problems(self, spec: EngineSpec, layout: EngineLayout, image: str) -> list[str]:
        """int8, the prefill delayer or spec.engine.compilation on an image whose SGLang predates their flags."""
        version = SGLANG_FACTS.image_version(image)
        problems = compilation_problems(SGLANG_FACTS, spec, image)
        if spec.precision == "int8" and version < MODELSLIM:
            problems.append(
                f"spec.precision: int8 needs SGLang's --quantization modelslim, which SGLang "
                f"{format_version(version)} (image {image}) lacks; use an image with SGLang "
                f"{format_version(MODELSLIM)} or newer, or precision bf16"
            )
        delayer = spec.batching.prefill_delayer
        if delayer is not None and delayer.enabled:
            knobs = delayer.max_delay_ms is not None or delayer.queue_min_ratio is not None
            needed = PREFILL_DELAYER_KNOBS if knobs else PREFILL_DELAYER_FLAG
            if version < needed:
                flag = (
                    "--prefill-delayer-max-delay-ms/-queue-min-ratio" if knobs else "--enable-prefill-delayer"
                )
                problems.append(
                    f"spec.batching.prefillDelayer: SGLang {format_version(version)} (image {image}) has no "
                    f"{flag}, so its launcher would refuse the flag and the pod would not start; use an image "
                    f"with SGLang {format_version(needed)} or newer"
                    + (
                        ", or leave out maxDelayMs and queueMinRatio"
                        if knobs and version >= PREFILL_DELAYER_FLAG
                        else ""
                    )
                )
        return problems
