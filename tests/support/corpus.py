"""AscendInferences the CRD refuses with the same sentence ``ascend-fleet validate`` prints, and good ones.

One corpus for the cel-python approximation (tests/unit) and for the real API server (tests/realapi).
"""

from __future__ import annotations

from tests.support.documents import inference

GOOD = inference("ok").engine("sglang").build()


def cr(name: str = "ok", engine: str = "sglang", engine_fields: dict | None = None, **spec) -> dict:
    """GOOD with a name, an engine (and its fields) and spec sections replaced (model fields are merged)."""
    return (
        inference(name)
        .engine(engine, **(engine_fields or {}))
        .model(**spec.pop("model", {}))
        .spec(**spec)
        .build()
    )


def rule(**fields) -> dict:
    return {"metric": "npu_utilization", "threshold": "85%", "for": "5m", "action": "scale_up", **fields}


def layout(tensor: int = 1, pipeline: int = 1, chip: str | None = None, per_node: int | None = None, **spec):
    hardware = {k: v for k, v in (("chip", chip), ("npusPerNode", per_node)) if v is not None}
    return cr(
        parallelism={"tensor": tensor, "pipeline": pipeline},
        **({"hardware": hardware} if hardware else {}),
        **spec,
    )


# Each refused at apply time by a CEL rule whose sentence ascend-fleet validate prints too.
SAME_SENTENCE: dict[str, dict] = {
    "910A takes powers of two": layout(3, chip="ascend910a"),
    "a small node caps the counts": layout(5, chip="ascend910a", per_node=6),
    "A3 takes one or even counts": layout(3, 3, chip="ascend910_93"),
    "A3 capped by its node": layout(5, chip="ascend910_93", per_node=6),
    "tensor larger than a node": layout(16),
    "tensor must divide the node": layout(3, 4),
    "whole nodes of a size the chip cannot give": layout(7, 2, chip="ascend910_93", per_node=7),
    "pipeline fills whole nodes": layout(4, 3),
    "pipeline fills whole nodes, lower is zero": layout(2, 3, per_node=4, chip="ascend910b"),
    "heads not divisible": layout(3, model={"numAttentionHeads": 32}),
    "heads fewer than tensor": layout(8, model={"numAttentionHeads": 4}),
    "more stages than layers": layout(1, 8, model={"numLayers": 4}),
    "vllm-ascend on 910A": cr(engine="vllm-ascend", hardware={"chip": "ascend910a"}),
    "bf16 (the default) on 910A": cr(hardware={"chip": "ascend910a"}),
    "a bf16 variant on 910A": cr(
        hardware={"chip": "ascend910a"},
        precision="fp16",
        routing={"mode": "inferencePool"},
        variants=[{"name": "fp16", "precision": "fp16"}, {"name": "bf16", "precision": "bf16"}],
    ),
    "name with capitals": cr(name="Bad-name"),
    "name starting with a digit": cr(name="1fleet"),
    "name too long": cr(name="x" * 53),
    "window too long": cr(rules=[rule(**{"for": "25h"})]),
    "window too long, in seconds": cr(rules=[rule(**{"for": 86401})]),
    "window of 10000h": cr(rules=[rule(**{"for": "10000h"})]),
    "window too long, in minutes": cr(rules=[rule(**{"for": "1441min"})]),
    "window too long, in mixed units": cr(rules=[rule(**{"for": "23h59min61s"})]),
    "fusion passes on SGLang": cr(engine="sglang", engine_fields={"compilation": {"fusion": ["normQuant"]}}),
    "eager with a capture size": cr(
        engine="vllm-ascend", engine_fields={"compilation": {"graphMode": "eager", "maxCaptureBatchSize": 8}}
    ),
    "eager with fusion passes": cr(
        engine="vllm-ascend", engine_fields={"compilation": {"graphMode": "eager", "fusion": ["actQuant"]}}
    ),
    "a compile cache with a .. segment": cr(engine_fields={"compilation": {"cacheDir": "/var/../cache"}}),
}

# Accepted by both.
ACCEPTED: dict[str, dict] = {
    "defaults": cr(),
    "910B tp4 pp2": layout(4, 2),
    "A3 multi-node": layout(16, 2, chip="ascend910_93"),
    "vllm-ascend on A3": cr(engine="vllm-ascend", hardware={"chip": "ascend910_93"}),
    "fp16 and int8 variants on 910A": cr(
        hardware={"chip": "ascend910a"},
        precision="fp16",
        routing={"mode": "inferencePool"},
        variants=[{"name": "fp16", "precision": "fp16"}, {"name": "int8", "precision": "int8"}],
    ),
    "name of 52": cr(name="a" * 52),
    "window of 24h": cr(rules=[rule(**{"for": "24h"}), rule(**{"for": 86400}), rule(**{"for": "1439min"})]),
    "numeric thresholds": cr(rules=[rule(threshold=0.85), rule(threshold=12, action="notify")]),
    "compilation on vLLM": cr(
        engine="vllm-ascend",
        engine_fields={
            "compilation": {
                "graphMode": "piecewise",
                "maxCaptureBatchSize": 64,
                "fusion": ["normQuant", "attnQuant"],
                "cacheDir": "/var/cache/compile",
            }
        },
    ),
    "compilation on SGLang": cr(
        engine_fields={"compilation": {"graphMode": "fullDecodeOnly", "cacheDir": "/var/cache/.sglang"}}
    ),
}
