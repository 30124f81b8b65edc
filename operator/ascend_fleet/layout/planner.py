"""Pure planner: NPUs per replica = tensor x pipeline, placed as one pod or as a gang of whole-node pods.

Rules (ARCHITECTURE.md, ENGINES.md):
- A replica that fits on one node is one pod requesting tensor x pipeline NPUs, and that count must be one
  the chip's device plugin hands out (910A: 1, 2, 4, 8; 910B: 1..8; A3: 1, 2, 4, 6, ..., 16).
- A larger replica is several pods, each taking a whole node. Tensor parallelism never crosses a node, so
  tensor divides npusPerNode; each pod then holds npusPerNode / tensor pipeline stages, and pipeline must be
  a multiple of that.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.v1alpha1 import AscendInferenceSpec

CHIP_LABEL = {"ascend910a": "Ascend 910A", "ascend910b": "Ascend 910B", "ascend910_93": "Ascend A3 (910_93)"}


def _a3_counts(limit: int) -> tuple[int, ...]:
    return (1, *range(2, limit + 1, 2))


# NPU counts one pod may request, per chip (device plugin rules).
ALLOWED_NPUS_PER_POD: dict[str, tuple[int, ...]] = {
    "ascend910a": (1, 2, 4, 8),
    "ascend910b": tuple(range(1, 9)),
    "ascend910_93": _a3_counts(16),
}


class LayoutError(ValueError):
    """A layout the hardware cannot run; the message says what would fit."""


@dataclass(frozen=True)
class Layout:
    """Where a spec's NPUs go."""

    tensor: int
    pipeline: int
    data: int
    npus_per_node: int
    npus_per_replica: int
    pods_per_replica: int
    npus_per_pod: int
    stages_per_pod: int

    @property
    def total_npus(self) -> int:
        return self.npus_per_replica * self.data

    @property
    def total_pods(self) -> int:
        return self.pods_per_replica * self.data

    @property
    def multi_pod(self) -> bool:
        return self.pods_per_replica > 1

    def summary(self) -> str:
        """E.g. ``2 replicas x 1 pod x 8 NPUs = 16 NPUs``."""
        replicas = _plural(self.data, "replica")
        pods = _plural(self.pods_per_replica, "pod")
        return f"{replicas} x {pods} x {self.npus_per_pod} NPUs = {self.total_npus} NPUs"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def allowed_counts(chip: str, npus_per_node: int) -> tuple[int, ...]:
    """NPU counts a single pod may request on this chip, capped by the node's size."""
    return tuple(n for n in ALLOWED_NPUS_PER_POD[chip] if n <= npus_per_node)


def plan(spec: AscendInferenceSpec) -> Layout:
    """Place the spec's parallel layout on pods, or raise LayoutError saying what would fit."""
    tensor, pipeline, data = spec.parallelism.tensor, spec.parallelism.pipeline, spec.parallelism.data
    chip = spec.hardware.chip
    per_node = spec.hardware.npus_per_node or 8
    _check_model(spec, tensor, pipeline)
    per_replica = tensor * pipeline
    if per_replica <= per_node:
        allowed = allowed_counts(chip, per_node)
        if per_replica not in allowed:
            raise LayoutError(
                f"tensor {tensor} x pipeline {pipeline} = {per_replica} NPUs per pod, but {CHIP_LABEL[chip]} pods "
                f"take {_list(allowed)} NPUs; {_suggest_single(tensor, pipeline, allowed)}"
            )
        return Layout(tensor, pipeline, data, per_node, per_replica, 1, per_replica, pipeline)
    return _plan_multi_pod(tensor, pipeline, data, per_node, chip)


def _plan_multi_pod(tensor: int, pipeline: int, data: int, per_node: int, chip: str) -> Layout:
    if tensor > per_node:
        raise LayoutError(
            f"tensor {tensor} is larger than a node ({per_node} NPUs) and tensor parallelism never crosses a node; "
            f"use tensor {_largest_divisor_at_most(per_node, tensor)} and raise pipeline to keep the NPU count"
        )
    if per_node % tensor:
        fits = [t for t in range(1, per_node + 1) if per_node % t == 0]
        raise LayoutError(
            f"a replica of {tensor * pipeline} NPUs spans several {per_node}-NPU nodes, so each pod takes a whole "
            f"node and tensor must divide {per_node}; tensor {tensor} does not (use one of {_list(fits)})"
        )
    if per_node not in ALLOWED_NPUS_PER_POD[chip]:
        raise LayoutError(
            f"a replica spanning nodes takes whole nodes, but {CHIP_LABEL[chip]} pods cannot request "
            f"{per_node} NPUs; set hardware.npusPerNode to one of {_list(ALLOWED_NPUS_PER_POD[chip])}"
        )
    stages_per_pod = per_node // tensor
    if pipeline % stages_per_pod:
        lower = pipeline - pipeline % stages_per_pod
        options = [p for p in (lower, lower + stages_per_pod) if p > 0]
        raise LayoutError(
            f"tensor {tensor} x pipeline {pipeline} = {tensor * pipeline} NPUs spans nodes; each {per_node}-NPU pod "
            f"holds {stages_per_pod} pipeline stages of tensor {tensor}, so pipeline must be a multiple of "
            f"{stages_per_pod}: try pipeline {' or '.join(str(p) for p in options)}"
        )
    pods = pipeline // stages_per_pod
    return Layout(tensor, pipeline, data, per_node, tensor * pipeline, pods, per_node, stages_per_pod)


def _check_model(spec: AscendInferenceSpec, tensor: int, pipeline: int) -> None:
    heads, layers = spec.model.num_attention_heads, spec.model.num_layers
    if heads is not None and heads % tensor:
        fits = [t for t in range(1, min(heads, 64) + 1) if heads % t == 0]
        raise LayoutError(
            f"tensor {tensor} does not divide the model's {heads} attention heads; use one of {_list(fits)}"
        )
    if layers is not None and layers < pipeline:
        raise LayoutError(f"pipeline {pipeline} has more stages than the model's {layers} layers; use at most {layers}")


def _suggest_single(tensor: int, pipeline: int, allowed: tuple[int, ...]) -> str:
    below = [n for n in allowed if n < tensor * pipeline]
    above = [n for n in allowed if n > tensor * pipeline]
    choices = [n for n in (below[-1] if below else None, above[0] if above else None) if n]
    return "pick tensor x pipeline = " + " or ".join(str(n) for n in choices)


def _largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _list(values: tuple[int, ...] | list[int]) -> str:
    values = list(values)
    if len(values) > 6 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    return ", ".join(str(v) for v in values)
