"""spec.variants on the real control plane: both variants' engines in the one InferencePool, the upstream
InferenceModelRewrite carrying the split, the picker told to keep each rewritten request on its variant's pods,
and status.traffic following the traffic annotation the control loop's shift_traffic writes."""

from __future__ import annotations

import json

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.kube import KubeError, wait_for
from ascend_fleet.render.picker_config import VARIANT_FILTER
from ascend_fleet.render.routing import picker_name
from tests.e2e.fleet import example
from tests.e2e.test_routing import apply_crds

pytestmark = pytest.mark.e2e

NAME = "qwen-1-5b"
VARIANTS = [
    {"name": "bf16", "precision": "bf16"},
    {"name": "int8", "precision": "int8", "model": "/models/Qwen2.5-1.5B-Instruct-w8a8"},
]


@pytest.fixture
def real(cluster):
    if cluster is None or hasattr(cluster, "emulator"):
        pytest.skip("applies the upstream CRDs with kubectl")
    return cluster


def command_flag(pod: dict, flag: str) -> str:
    command = pod["spec"]["containers"][0]["command"]
    return command[command.index(flag) + 1]


def selected(selector: dict[str, str], pod: dict) -> bool:
    labels = pod["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in selector.items())


def targets(kube, namespace: str) -> list[tuple[str, int]]:
    rewrite = kube.get("InferenceModelRewrite", namespace, NAME)
    return [(t["modelRewrite"], t["weight"]) for t in rewrite["spec"]["rules"][0]["targets"]]


def traffic(fleet) -> dict[str, int]:
    return {t["variant"]: t["weight"] for t in (fleet.get(NAME).get("status") or {}).get("traffic") or []}


def test_a_fleet_with_an_int8_variant_serves_both_in_one_pool_split_by_the_rewrite(
    real, fleet, kube, namespace
):
    apply_crds(real, kube)
    doc = example(
        "sglang-small.yaml",
        parallelism={"tensor": 2, "data": 2},
        routing={"mode": "inferencePool"},
        variants=VARIANTS,
    )
    fleet.apply(doc)
    fleet.wait_ready(NAME, 2, timeout=120)

    # Both variants' leaders, each serving its own name at its own precision, all in the one pool.
    pool = kube.get("InferencePool", namespace, NAME)
    selector = pool["spec"]["selector"]["matchLabels"]
    leaders = [
        p
        for p in kube.list("Pod", namespace, {names.LABEL_NAME: NAME, names.LABEL_ROLE: names.ROLE_LEADER})
        if not p["metadata"].get("deletionTimestamp")
    ]
    by_variant = {p["metadata"]["labels"][names.LABEL_VARIANT]: p for p in leaders}
    assert sorted(by_variant) == ["bf16", "int8"] and all(selected(selector, p) for p in leaders)
    assert command_flag(by_variant["bf16"], "--served-model-name") == "qwen2.5-1.5b-bf16"
    assert command_flag(by_variant["int8"], "--served-model-name") == "qwen2.5-1.5b-int8"
    assert command_flag(by_variant["int8"], "--quantization") == "modelslim"
    assert command_flag(by_variant["int8"], "--model-path") == "/models/Qwen2.5-1.5B-Instruct-w8a8"

    # The rewrite: requests for the base name split evenly at first, stored by the server as rendered.
    rewrite = kube.get("InferenceModelRewrite", namespace, NAME)
    assert rewrite["spec"]["poolRef"]["name"] == NAME
    assert rewrite["spec"]["rules"][0]["matches"] == [{"model": {"type": "Exact", "value": "qwen2.5-1.5b"}}]
    assert targets(kube, namespace) == [("qwen2.5-1.5b-bf16", 50), ("qwen2.5-1.5b-int8", 50)]
    assert rewrite["metadata"]["ownerReferences"][0]["name"] == NAME
    wait_for(lambda: traffic(fleet) == {"bf16": 50, "int8": 50}, 30, "status.traffic at 50/50")
    assert fleet.condition(NAME, "Ready")["status"] == "True"

    # The picker keeps a rewritten request on the pods of its variant.
    config = yaml.safe_load(kube.get("ConfigMap", namespace, picker_name(NAME))["data"]["epp.yaml"])
    (variant_filter,) = [p for p in config["plugins"] if p["type"] == VARIANT_FILTER]
    assert variant_filter["parameters"]["models"] == {
        "qwen2.5-1.5b-bf16": "bf16",
        "qwen2.5-1.5b-int8": "int8",
    }

    # What shift_traffic writes: the annotation. The rewrite and status.traffic follow; no pod is touched.
    pods_before = sorted(p["metadata"]["uid"] for p in leaders)
    kube.patch(
        names.KIND,
        namespace,
        NAME,
        {"metadata": {"annotations": {names.ANNOTATION_TRAFFIC: json.dumps({"bf16": 25, "int8": 75})}}},
    )
    wait_for(
        lambda: targets(kube, namespace) == [("qwen2.5-1.5b-bf16", 25), ("qwen2.5-1.5b-int8", 75)],
        30,
        "the rewrite at 25/75",
    )
    wait_for(lambda: traffic(fleet) == {"bf16": 25, "int8": 75}, 30, "status.traffic at 25/75")
    # All on one variant: the other leaves the rewrite (upstream weights start at 1).
    kube.patch(
        names.KIND,
        namespace,
        NAME,
        {"metadata": {"annotations": {names.ANNOTATION_TRAFFIC: json.dumps({"bf16": 0, "int8": 100})}}},
    )
    wait_for(lambda: targets(kube, namespace) == [("qwen2.5-1.5b-int8", 100)], 30, "the rewrite all on int8")
    leaders_after = kube.list("Pod", namespace, {names.LABEL_NAME: NAME, names.LABEL_ROLE: names.ROLE_LEADER})
    assert sorted(p["metadata"]["uid"] for p in leaders_after) == pods_before

    # Variants removed: the rewrite has nothing to split, so the operator deletes it.
    fleet.patch_spec(NAME, {"variants": None})
    wait_for(lambda: not kube.list("InferenceModelRewrite", namespace), 60, "the rewrite deleted")
    assert kube.get("InferencePool", namespace, NAME)  # routing stays


def test_variants_without_an_inference_pool_are_not_ready_with_a_sentence(fleet):
    fleet.apply(example("sglang-small.yaml", variants=VARIANTS))
    ready = wait_for(
        lambda: (c := fleet.condition(NAME, "Ready")).get("status") == "False" and c, 60, "Ready=False"
    )
    assert "spec.variants needs spec.routing.mode inferencePool" in ready["message"]
    assert not fleet.pod_names(NAME)


def invalid_spec(fleet) -> dict | None:
    condition = fleet.condition(NAME, "Ready")
    return condition if condition.get("reason") == "InvalidSpec" else None


def test_a_variant_at_a_precision_the_engine_image_cannot_run_is_not_ready_with_a_sentence(fleet):
    # The image's version is nothing the schema can see: the operator's Ready=False says it, as for
    # spec.precision, and no pod is created.
    old = {"type": "sglang", "image": "lmsysorg/sglang:v0.4.6-cann8.1.rc1-910b"}
    fleet.apply(
        example("sglang-small.yaml", engine=old, routing={"mode": "inferencePool"}, variants=VARIANTS)
    )
    ready = wait_for(lambda: invalid_spec(fleet), 60, "Ready=False, InvalidSpec")
    assert ready["status"] == "False"
    assert "spec.variants[1].precision: int8 needs SGLang's --quantization modelslim" in ready["message"]
    assert not fleet.pod_names(NAME)


def test_a_variant_at_a_precision_the_chip_cannot_run_is_refused_with_a_sentence(fleet):
    """bf16 on a 910A: the CRD's rule refuses it at apply; where no rule runs (the emulator, a cluster with an
    older CRD) the operator's Ready=False says the same sentence."""
    sentence = (
        "precision bf16 does not run on hardware.chip ascend910a: the Ascend 910A computes fp16 and int8 only"
    )
    variants = [{"name": "fp16", "precision": "fp16"}, {"name": "bf16", "precision": "bf16"}]
    doc = example(
        "sglang-small.yaml",
        hardware={"chip": "ascend910a"},
        precision="fp16",
        routing={"mode": "inferencePool"},
        variants=variants,
    )
    try:
        fleet.apply(doc)
    except KubeError as refused:
        assert sentence in str(refused)
        return
    ready = wait_for(lambda: invalid_spec(fleet), 60, "Ready=False, InvalidSpec")
    assert f"spec.variants[1].precision: {sentence}" in ready["message"]
    assert not fleet.pod_names(NAME)
