"""Precision variants: replicas of one fleet that serve the model at different precisions, and their split.

A fleet with ``spec.variants`` runs each replica as one of the variants (replica ``i`` is variant
``i mod len(variants)``, so numbering stays stable and unique while the fleet scales), every engine serving the
model under ``<model>-<variant>``. The endpoint picker's InferenceModelRewrite splits requests for the base
model name between those names by weight. The weights are whole percents summing to 100; they live in the
``inference.ascendfleet.io/traffic`` annotation, which the control loop's ``shift_traffic`` writes, and show in
``status.traffic``; without it the split is even, as the replicas are. The functions here are pure: they read and move weights, never write them.
The variant and its share are fields of the spec and the status (``workload``, ``status_types``), so this module
sits above the spec and reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from .status_types import TrafficShare
from .v1alpha1 import AscendInferenceSpec
from .workload import PrecisionVariant

FULL = 100  # weights are whole percents


def variant_of(variants: Sequence[PrecisionVariant], replica: int) -> PrecisionVariant | None:
    """The variant replica ``replica`` runs (None: the fleet has no variants)."""
    if not variants:
        return None
    return variants[replica % len(variants)]


def served_name(model_name: str, variant: PrecisionVariant) -> str:
    """The model name a variant's engines serve: the base name and the variant's."""
    return f"{model_name}-{variant.name}"


def default_weights(variants: Sequence[PrecisionVariant]) -> dict[str, int]:
    """The split before any rule moved it: even, as the replicas are (the first variant takes the remainder),
    so that no variant's replicas stand idle until a rule moves traffic."""
    if not variants:
        return {}
    share = FULL // len(variants)
    return {v.name: share + (FULL - share * len(variants) if i == 0 else 0) for i, v in enumerate(variants)}


def parse_weights(text: str | None) -> dict[str, int] | None:
    """The annotation's weights, or None when absent or not a JSON object of whole numbers."""
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in raw.values()
    ):
        return None
    return {str(k): int(v) for k, v in raw.items()}


def current_weights(variants: Sequence[PrecisionVariant], stored: Mapping[str, int] | None) -> dict[str, int]:
    """The split in force: the stored one when it names exactly these variants with percents summing to 100,
    else the default (a variant added or removed, or a hand edit that does not add up, starts over)."""
    if not variants:
        return {}
    names = [v.name for v in variants]
    if (
        stored is not None
        and set(stored) == set(names)
        and all(0 <= w <= FULL for w in stored.values())
        and sum(stored.values()) == FULL
    ):
        return {n: stored[n] for n in names}
    return default_weights(variants)


def shifted(weights: Mapping[str, int], to: str, step: int) -> dict[str, int]:
    """``step`` percent more to ``to``, taken from the others, the largest share first (unchanged at 100)."""
    moved = dict(weights)
    want = min(step, FULL - moved.get(to, 0))
    for name in sorted((n for n in moved if n != to), key=lambda n: -moved[n]):
        take = min(want, moved[name])
        moved[name] -= take
        moved[to] = moved.get(to, 0) + take
        want -= take
    return moved


def weights_text(weights: Mapping[str, int]) -> str:
    """The annotation's value: compact JSON in the variants' order."""
    return json.dumps(dict(weights), separators=(",", ":"))


def describe_weights(weights: Mapping[str, int]) -> str:
    """``fp16 75%, int8 25%`` for Events and status.actions."""
    return ", ".join(f"{name} {weight}%" for name, weight in weights.items())


def traffic_shares(weights: Mapping[str, int]) -> list[TrafficShare]:
    """status.traffic: one entry per variant, in the spec's order."""
    return [TrafficShare(variant=name, weight=weight) for name, weight in weights.items()]


def variant_spec(spec: AscendInferenceSpec, variant: PrecisionVariant | None) -> AscendInferenceSpec:
    """The spec one variant's engines run: its precision, its weights, and its served name (unchanged for None)."""
    if variant is None:
        return spec
    model = spec.model.model_copy(
        update={"name": served_name(spec.model.name, variant), "path": variant.model or spec.model.path}
    )
    return spec.model_copy(update={"precision": variant.precision, "model": model})


def fleet_weights(spec: AscendInferenceSpec, metadata: Mapping) -> dict[str, int]:
    """The split in force for an object: its traffic annotation read against its variants."""
    from . import names

    annotations = metadata.get("annotations") or {}
    return current_weights(spec.variants, parse_weights(annotations.get(names.ANNOTATION_TRAFFIC)))


def serving_split(weights: Mapping[str, int], serving: set[str]) -> dict[str, int]:
    """The split the picker can serve: a variant with no serving replica gives its share to the serving variant
    with the largest share (the first listed on a tie); unchanged when every weighted variant serves or none does.

    The picker's variant filter refuses a request drawn to a variant without a pod, so a restart or rollout of a
    variant's last replica would otherwise refuse its share of the requests until a new one serves.
    """
    if not serving or all(name in serving for name, weight in weights.items() if weight > 0):
        return dict(weights)
    keep = max((name for name in weights if name in serving), key=lambda name: weights[name])
    moved = {name: (weight if name in serving else 0) for name, weight in weights.items()}
    moved[keep] += sum(weight for name, weight in weights.items() if name not in serving)
    return moved


def variant_warnings(spec: AscendInferenceSpec) -> list[str]:
    """Variants that render but do not do what listing them suggests, as sentences for the user.

    One variant turns every replica into it (``variant_of`` assigns each replica a listed variant), so the
    fleet loses ``spec.precision`` and the split has nothing to move. An int8 variant without weights of its own
    serves ``spec.model.path``, the fleet's bf16/fp16 weights, with the engine's ModelSlim quantization, which
    reads W8A8 weights only.
    """
    found = []
    if len(spec.variants) == 1:
        (only,) = spec.variants
        found.append(
            f"spec.variants lists one variant ({only.name}), so every replica runs it: precision "
            f"{only.precision} instead of spec.precision {spec.precision}, served as "
            f"{served_name(spec.model.name, only)}, with no other variant to shift traffic to; list a second "
            "variant (e.g. the fleet's own precision), or drop spec.variants and set spec.precision"
        )
    for index, variant in enumerate(spec.variants):
        weights = variant.model or spec.model.path
        if variant.precision == "int8" and spec.precision != "int8" and weights == spec.model.path:
            found.append(
                f"spec.variants[{index}] ({variant.name}) is int8 but serves spec.model.path ({weights}), the "
                f"fleet's {spec.precision} weights, while int8 runs the engine's ModelSlim quantization, which "
                f"needs W8A8 weights; set spec.variants[{index}].model to the quantized weights' path"
            )
    return found
