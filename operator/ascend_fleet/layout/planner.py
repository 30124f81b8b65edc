"""Pure planner: NPUs per replica = tensor x pipeline, placed as one pod or as a gang of whole-node pods.

Rules (the chips' device plugins and the engines' parallel layouts; docs/decisions.md):
- A replica that fits on one node is one pod requesting tensor x pipeline NPUs, and that count must be one
  the chip's device plugin hands out (910A: 1, 2, 4, 8; 910B: 1..8; A3: 1, 2, 4, 6, ..., 16).
- A larger replica is several pods, each taking a whole node. Tensor parallelism never crosses a node, so
  tensor divides npusPerNode; each pod then holds npusPerNode / tensor pipeline stages, and pipeline must be
  a multiple of that.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api import checks
from ..api.checks import ALLOWED_NPUS_PER_POD, CHIP_LABEL, allowed_counts
from ..api.disaggregation import ROLES
from ..api.v1alpha1 import AscendInferenceSpec, Parallelism

# The chip tables and the sentences live with the CRD's CEL rules that state the same checks.
__all__ = [
    "ALLOWED_NPUS_PER_POD",
    "CHIP_LABEL",
    "Layout",
    "LayoutError",
    "allowed_counts",
    "plan",
    "plan_roles",
    "role_spec",
]


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


def plan(spec: AscendInferenceSpec) -> Layout:
    """Place the spec's parallel layout on pods, or raise LayoutError saying what would fit."""
    tensor, pipeline, data = spec.parallelism.tensor, spec.parallelism.pipeline, spec.parallelism.data
    chip = spec.hardware.chip
    per_node = spec.hardware.npus_per_node or checks.DEFAULT_NPUS_PER_NODE[chip]
    _check_model(spec, tensor, pipeline)
    per_replica = tensor * pipeline
    if per_replica <= per_node:
        if per_replica not in allowed_counts(chip, per_node):
            raise LayoutError(checks.single_pod_sentence(tensor, pipeline, chip, per_node))
        return Layout(tensor, pipeline, data, per_node, per_replica, 1, per_replica, pipeline)
    return _plan_multi_pod(tensor, pipeline, data, per_node, chip)


def _plan_multi_pod(tensor: int, pipeline: int, data: int, per_node: int, chip: str) -> Layout:
    if tensor > per_node:
        raise LayoutError(checks.tensor_too_large_sentence(tensor, per_node))
    if per_node % tensor:
        raise LayoutError(checks.tensor_divides_node_sentence(tensor, pipeline, per_node))
    if per_node not in ALLOWED_NPUS_PER_POD[chip]:
        raise LayoutError(checks.whole_node_sentence(chip, per_node))
    stages_per_pod = per_node // tensor
    if pipeline % stages_per_pod:
        raise LayoutError(checks.stages_sentence(tensor, pipeline, per_node))
    pods = pipeline // stages_per_pod
    return Layout(tensor, pipeline, data, per_node, tensor * pipeline, pods, per_node, stages_per_pod)


def _check_model(spec: AscendInferenceSpec, tensor: int, pipeline: int) -> None:
    heads, layers = spec.model.num_attention_heads, spec.model.num_layers
    if heads is not None and heads % tensor:
        raise LayoutError(checks.heads_sentence(tensor, heads))
    if layers is not None and layers < pipeline:
        raise LayoutError(checks.layers_sentence(pipeline, layers))


def role_spec(spec: AscendInferenceSpec, role: str) -> AscendInferenceSpec:
    """The spec one role's instances run: the fleet's, with the role's parallel layout in spec.parallelism."""
    split = spec.disaggregation
    assert split is not None, "role_spec needs a fleet with spec.disaggregation"
    own = split.role(role).parallelism
    parallelism = Parallelism(tensor=own.tensor, pipeline=own.pipeline, data=own.data)
    return spec.model_copy(update={"parallelism": parallelism})


def plan_roles(spec: AscendInferenceSpec) -> dict[str, Layout]:
    """Each role's layout in a two-role fleet (empty for a colocated one); LayoutError names the role."""
    if spec.disaggregation is None:
        return {}
    layouts: dict[str, Layout] = {}
    for role in ROLES:
        try:
            layouts[role] = plan(role_spec(spec, role))
        except LayoutError as error:
            raise LayoutError(f"{role} role: {error}") from None
    return layouts
