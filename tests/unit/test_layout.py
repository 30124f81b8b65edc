import pytest

from ascend_fleet.api.v1alpha1 import AscendInferenceSpec
from ascend_fleet.layout import LayoutError, plan
from tests.support.documents import inference


def layout_of(tensor, pipeline, data=1, chip="ascend910b", npus_per_node=None, **model):
    hardware = {"chip": chip}
    if npus_per_node:
        hardware["npusPerNode"] = npus_per_node
    doc = (
        inference()
        .model(**model)
        # vllm-ascend does not run on the 910A; the planner's rules are the same for both engines.
        .engine("sglang" if chip == "ascend910a" else "vllm-ascend")
        .parallelism(tensor=tensor, pipeline=pipeline, data=data)
        .section("hardware", **hardware)
        .build()
    )
    return plan(AscendInferenceSpec.model_validate(doc["spec"]))


def test_seed_layout_is_two_single_pod_replicas_of_eight():
    layout = layout_of(4, 2, 2)
    assert (layout.pods_per_replica, layout.npus_per_pod, layout.total_npus) == (1, 8, 16)
    assert layout.summary() == "2 replicas x 1 pod x 8 NPUs = 16 NPUs"


def test_multi_node_replica_takes_whole_nodes():
    layout = layout_of(8, 4)
    assert (layout.pods_per_replica, layout.npus_per_pod, layout.stages_per_pod, layout.total_npus) == (
        4,
        8,
        1,
        32,
    )


def test_two_stages_per_node_when_tensor_is_half_a_node():
    layout = layout_of(4, 4)
    assert (layout.pods_per_replica, layout.stages_per_pod) == (2, 2)


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_910a_takes_powers_of_two(count):
    assert layout_of(count, 1, chip="ascend910a").npus_per_pod == count


@pytest.mark.parametrize("count", [3, 5, 6, 7])
def test_910a_rejects_other_counts_and_suggests_neighbours(count):
    with pytest.raises(
        LayoutError, match=r"910A pods take 1, 2, 4, 8 NPUs; pick tensor x pipeline = \d( or \d)?"
    ):
        layout_of(count, 1, chip="ascend910a")


@pytest.mark.parametrize("count", range(1, 9))
def test_910b_takes_one_to_eight(count):
    assert layout_of(count, 1).npus_per_pod == count


@pytest.mark.parametrize("count", [1, 2, 4, 6, 8, 10, 12, 14, 16])
def test_a3_takes_one_or_even_counts(count):
    layout = layout_of(count, 1, chip="ascend910_93")
    assert (layout.npus_per_node, layout.npus_per_pod, layout.pods_per_replica) == (16, count, 1)


@pytest.mark.parametrize("count", [3, 5, 7, 9, 15])
def test_a3_rejects_odd_counts(count):
    with pytest.raises(LayoutError, match="A3"):
        layout_of(count, 1, chip="ascend910_93")


def test_a3_multi_node():
    layout = layout_of(16, 2, chip="ascend910_93")
    assert (layout.pods_per_replica, layout.npus_per_pod, layout.total_npus) == (2, 16, 32)


def test_tensor_never_crosses_a_node():
    with pytest.raises(LayoutError, match="tensor parallelism never crosses a node; use tensor 8"):
        layout_of(16, 1)


def test_tensor_must_divide_the_node_when_spanning():
    with pytest.raises(
        LayoutError, match=r"tensor must divide 8; tensor 3 does not \(use one of 1, 2, 4, 8\)"
    ):
        layout_of(3, 4)


def test_pipeline_must_fill_whole_nodes():
    with pytest.raises(LayoutError, match="pipeline must be a multiple of 2: try pipeline 2 or 4"):
        layout_of(4, 3)


def test_smaller_nodes():
    layout = layout_of(4, 2, npus_per_node=4)
    assert (layout.pods_per_replica, layout.npus_per_pod) == (2, 4)


def test_heads_must_divide_by_tensor():
    with pytest.raises(
        LayoutError, match="tensor 8 does not divide the model's 28 attention heads; use tensor 7 or 14"
    ):
        layout_of(8, 1, num_attention_heads=28)


def test_layers_bound_the_pipeline():
    with pytest.raises(LayoutError, match="more stages than the model's 2 layers"):
        layout_of(1, 4, num_layers=2)
    assert layout_of(4, 2, num_attention_heads=28, num_layers=28).npus_per_replica == 8


def test_zero_replicas_is_a_valid_empty_fleet():
    assert layout_of(4, 2, 0).total_npus == 0
