"""Precision variants in the simulator: each replica's speed and the weighted draw of a request's variant.

A fleet with ``spec.variants`` runs replica ``i`` as variant ``i mod n``, as the operator renders it; the
endpoint picker's rewrite draws each request's variant by the split's weights and its variant filter keeps
that variant's replicas. An int8 (W8A8) replica decodes and prefills ``INT8_SPEEDUP`` times as fast as the
batch curve (an assumption, see docs/simulator.md); bf16 and fp16 run at the curve.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..api.v1alpha1 import AscendInferenceSpec

# W8A8 halves the bytes of weights each decode step reads and runs the matrix products in int8; on a
# memory-bound decode that is worth well under 2x. 1.4 is an assumption, not a measurement on Ascend.
INT8_SPEEDUP = 1.4
SPEED = {"bf16": 1.0, "fp16": 1.0, "int8": INT8_SPEEDUP}


@dataclass(frozen=True)
class SimVariant:
    """One variant as the simulator runs it."""

    name: str
    precision: str
    speed: float


def sim_variants(spec: AscendInferenceSpec) -> tuple[SimVariant, ...]:
    """The spec's variants with their speeds (empty for a fleet without variants)."""
    return tuple(SimVariant(v.name, v.precision, SPEED[v.precision]) for v in spec.variants)


def draw(rng: random.Random, weights: Mapping[str, int]) -> str | None:
    """A variant drawn by weight, as the picker's rewrite draws a target model (None: no weights)."""
    total = sum(weights.values())
    if total <= 0:
        return None
    pick = rng.randrange(total)
    for name, weight in weights.items():
        if pick < weight:
            return name
        pick -= weight
    return None  # unreachable: pick < total


def precision_shares(
    variants: Sequence[SimVariant], served_by: Sequence[int], tokens: Sequence[int], done: Sequence[bool]
) -> dict[str, float]:
    """Share of the output tokens of completed requests that each precision served (empty without variants)."""
    if not variants:
        return {}
    counts = {v.precision: 0 for v in variants}
    for replica, count, ok in zip(served_by, tokens, done, strict=True):
        if ok and replica >= 0:
            counts[variants[replica % len(variants)].precision] += count
    total = sum(counts.values())
    return {p: (c / total if total else 0.0) for p, c in counts.items()}
