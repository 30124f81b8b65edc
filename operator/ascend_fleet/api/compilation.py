"""spec.engine.compilation: graph mode, capture size, fusion passes and the compile cache, per engine.

The API names each setting once; each engine's facts (``engines/<engine>.py``, ``CompilationFacts``) say what it
becomes in that engine's own options, and which of the settings the engine has at all. What the CRD can say
(the enumerations, the bounds, the engine without fusion passes, eager with a capture size) it says as CEL too.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import ConfigDict, Field, model_validator

from ..engines.base import EngineFacts
from ..engines.registry import builtin_facts
from .bounds import MAX_PATH_LENGTH
from .fields import Model
from .names import SHM_PATH

GraphMode = Literal["eager", "piecewise", "fullDecodeOnly"]
# The fusion passes any engine names (vLLM's PassConfig switches); an engine without one of them refuses it.
FusionPass = Literal["normQuant", "actQuant", "attnQuant"]
FUSION_PASSES: tuple[str, ...] = get_args(FusionPass)
# The CRD's bound on the largest captured batch: far above vLLM's own default ceiling (512); every captured
# size holds device memory.
MAX_CAPTURE_BATCH_SIZE = 4096

# cacheDir's segments: letters, digits, dots, dashes and underscores (no spaces, no shell or YAML specials).
CACHE_DIR_PATTERN = r"^(/[A-Za-z0-9._-]+)+$"
EAGER_WITH_GRAPH_SETTINGS = (
    "graphMode eager runs without torch.compile and graphs, so maxCaptureBatchSize and fusion have nothing to "
    "act on; remove them, or choose graphMode piecewise or fullDecodeOnly"
)
# CEL on Compilation (self is spec.engine.compilation); the message is the sentence the model's check gives.
EAGER_RULE = (
    "!has(self.graphMode) || self.graphMode != 'eager' || "
    "(!has(self.maxCaptureBatchSize) && (!has(self.fusion) || size(self.fusion) == 0))"
)
CACHE_DIR_DOTS_RULE = "!has(self.cacheDir) || !self.cacheDir.matches('/[.][.]?(/|$)')"
CACHE_DIR_DOTS = "cacheDir: a path without . or .. segments, e.g. /var/cache/compile"


class Compilation(Model):
    """How the engine compiles the model: graphs, their largest batch, fusion passes and the compile cache."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": EAGER_RULE, "message": EAGER_WITH_GRAPH_SETTINGS},
                {"rule": CACHE_DIR_DOTS_RULE, "message": CACHE_DIR_DOTS},
            ]
        }
    )

    graph_mode: GraphMode | None = Field(
        default=None,
        description="eager: no torch.compile and no graphs (vLLM --enforce-eager; SGLang both phases' "
        "graphs disabled); piecewise: compiled pieces captured as graphs between attention (vLLM "
        "cudagraph_mode PIECEWISE; SGLang tc_piecewise prefill, full decode graphs); fullDecodeOnly: one graph "
        "per decode batch size, prefill eager (vLLM FULL_DECODE_ONLY; SGLang decode full, prefill disabled). "
        "Absent: the engine's own default.",
    )
    max_capture_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CAPTURE_BATCH_SIZE,
        description="The largest batch a graph is captured for (vLLM max_cudagraph_capture_size; SGLang "
        "--cuda-graph-max-bs-decode); larger batches run without a graph.",
    )
    fusion: list[FusionPass] = Field(
        default_factory=list,
        max_length=len(FUSION_PASSES),
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Fusion passes to turn on (vLLM --compilation-config pass_config): normQuant "
        "(fuse_norm_quant), actQuant (fuse_act_quant), attnQuant (fuse_attn_quant). SGLang names none.",
    )
    cache_dir: str | None = Field(
        default=None,
        max_length=MAX_PATH_LENGTH,
        pattern=CACHE_DIR_PATTERN,
        description="Where the engine keeps its compile cache (VLLM_CACHE_ROOT; SGLANG_CACHE_DIR): the "
        "operator mounts an emptyDir there, which a volume the template's engine container mounts at the same "
        "path replaces (a persistentVolumeClaim shares the compiled graphs between pods and restarts).",
    )

    @model_validator(mode="after")
    def _eager_alone(self) -> Compilation:
        if self.graph_mode == "eager" and (self.max_capture_batch_size is not None or self.fusion):
            raise ValueError(EAGER_WITH_GRAPH_SETTINGS)
        if len(set(self.fusion)) != len(self.fusion):
            repeated = sorted({p for p in self.fusion if self.fusion.count(p) > 1})
            raise ValueError(f"fusion: name each pass once; repeated: {', '.join(repeated)}")
        if self.cache_dir is not None and {".", ".."} & set(self.cache_dir.split("/")):
            raise ValueError(CACHE_DIR_DOTS)
        return self


def engines_with_fusion() -> list[str]:
    """The production engines that name fusion passes (for the CRD's rule)."""
    return [f.type for f in builtin_facts() if f.compilation is not None and f.compilation.fusion]


def fusion_message() -> str:
    """The sentence for fusion passes on an engine that names none: the CRD's message and the model's."""
    facts_list = builtin_facts()
    without = [f.label for f in facts_list if f.compilation is not None and not f.compilation.fusion]
    return (
        f"compilation.fusion: {' and '.join(without)} names no fusion passes of its own to turn on; remove "
        f"compilation.fusion, or use engine.type {' or '.join(engines_with_fusion())}"
    )


def fusion_rule() -> str:
    """CEL on Engine (self is spec.engine): fusion passes only on an engine that names them."""
    engines = " || ".join(f"self.type == '{t}'" for t in engines_with_fusion())
    return f"!has(self.compilation) || !has(self.compilation.fusion) || size(self.compilation.fusion) == 0 || {engines}"


def engine_compilation_problems(compilation: Compilation, facts: EngineFacts) -> list[str]:
    """What the engine's facts cannot render of spec.engine.compilation, each a sentence."""
    own = facts.compilation
    if own is None:
        return [
            f"compilation: the {facts.type} engine renders no compilation settings; remove compilation and "
            "pass the engine's own options in engine.args"
        ]
    problems = []
    if compilation.graph_mode is not None and compilation.graph_mode not in own.graph_modes:
        problems.append(
            f"compilation.graphMode: {facts.label} has no {compilation.graph_mode} mode here; use "
            f"{' or '.join(own.graph_modes)}"
        )
    if compilation.fusion and not own.fusion:
        problems.append(fusion_message())
    elif unknown := [p for p in compilation.fusion if p not in own.fusion]:
        problems.append(
            f"compilation.fusion: {facts.label} has no {', '.join(unknown)} pass; it names "
            f"{', '.join(own.fusion)}"
        )
    return problems


def _overlaps(path: str, other: str) -> bool:
    """One path is the other or lies under it."""
    a, b = path.rstrip("/") + "/", other.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def cache_dir_problems(
    cache_dir: str, model_mount: str | None, env_names: list[str], cache_env: str | None
) -> list[str]:
    """The compile cache's folder against the pod's other mounts and the user's env, each a sentence.

    ``model_mount`` is model.mountPath where a volume is mounted there (read-only), else None.
    """
    problems = []
    if model_mount is not None and _overlaps(cache_dir, model_mount):
        problems.append(
            f"spec.engine.compilation.cacheDir {cache_dir!r} overlaps model.mountPath {model_mount!r}, where the "
            "weights are mounted read-only; use a folder of its own, e.g. /var/cache/compile"
        )
    if _overlaps(cache_dir, SHM_PATH):
        problems.append(
            f"spec.engine.compilation.cacheDir {cache_dir!r} overlaps {SHM_PATH}, the in-memory volume the "
            "engines' collectives use; use a folder of its own, e.g. /var/cache/compile"
        )
    if cache_env is not None and cache_env in env_names:
        problems.append(
            f"spec.engine.env: {cache_env} is what spec.engine.compilation.cacheDir sets; set one of them"
        )
    return problems


__all__ = [
    "CACHE_DIR_DOTS_RULE",
    "EAGER_RULE",
    "EAGER_WITH_GRAPH_SETTINGS",
    "FUSION_PASSES",
    "MAX_CAPTURE_BATCH_SIZE",
    "Compilation",
    "FusionPass",
    "GraphMode",
    "cache_dir_problems",
    "engine_compilation_problems",
    "engines_with_fusion",
    "fusion_message",
    "fusion_rule",
]
