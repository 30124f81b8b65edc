"""The test-document builder builds the documents the API accepts, and each build is a fresh copy."""

from __future__ import annotations

from ascend_fleet.render import validate
from tests.support.documents import example, inference


def test_the_builder_writes_each_part_where_the_api_reads_it():
    doc = (
        inference("qwen", "qwen2.5-7b")
        .namespace("team-a")
        .uid("u-1")
        .generation(4)
        .engine("sglang", image="sglang:v1")
        .parallelism(tensor=4, pipeline=2, data=2)
        .rule("npu_utilization", "85%", "scale_up")
        .rule("mem_fragmentation", "15%", "restart_service", window="10m", scope="replica")
        .routing("inferencePool", classes=[{"name": "all", "priority": 0}])
        .section("batching", maxBatchSize=32)
        .build()
    )
    assert doc == {
        "apiVersion": "inference.ascendfleet.io/v1alpha1",
        "kind": "AscendInference",
        "metadata": {"name": "qwen", "namespace": "team-a", "uid": "u-1", "generation": 4},
        "spec": {
            "model": {"name": "qwen2.5-7b", "path": "/models/qwen2.5-7b"},
            "engine": {"type": "sglang", "image": "sglang:v1"},
            "parallelism": {"tensor": 4, "pipeline": 2, "data": 2},
            "rules": [
                {"metric": "npu_utilization", "threshold": "85%", "for": "5m", "action": "scale_up"},
                {
                    "metric": "mem_fragmentation",
                    "threshold": "15%",
                    "for": "10m",
                    "action": "restart_service",
                    "scope": "replica",
                },
            ],
            "routing": {"mode": "inferencePool", "classes": [{"name": "all", "priority": 0}]},
            "batching": {"maxBatchSize": 32},
        },
    }
    obj = validate(doc).obj
    assert (obj.spec.parallelism.tensor, obj.spec.parallelism.pipeline, obj.spec.parallelism.data) == (
        4,
        2,
        2,
    )
    assert [rule.action for rule in obj.spec.rules] == ["scale_up", "restart_service"]


def test_model_fields_merge_and_unset_degrees_stay_unset():
    doc = inference().model(numLayers=32).model(path="/weights/m").engine("vllm-ascend").parallelism(tensor=8)
    spec = doc.build()["spec"]
    assert spec["model"] == {"name": "m", "path": "/weights/m", "numLayers": 32}
    assert spec["parallelism"] == {"tensor": 8}


def test_each_build_is_a_copy_the_test_may_change():
    builder = inference().engine("vllm-ascend").rules([])
    first = builder.build()
    first["spec"]["rules"].append({"metric": "x"})
    first["metadata"]["name"] = "changed"
    assert builder.build()["spec"]["rules"] == [] and builder.build()["metadata"]["name"] == "llm"


def test_an_example_file_is_read_and_changed_by_section():
    doc = example("sglang-small.yaml").spec(rules=[]).engine("vllm-ascend").build()
    assert doc["metadata"]["name"] == "qwen-1-5b"
    assert doc["spec"]["rules"] == [] and doc["spec"]["engine"] == {"type": "vllm-ascend"}
    assert doc["spec"]["parallelism"] == {"tensor": 2, "data": 1}  # the file's, untouched


def test_merge_updates_the_sections_already_set_and_sets_the_others():
    builder = inference().engine("sglang").section("hardware", chip="ascend910b")
    spec = builder.merge(hardware={"npusPerNode": 16}, engine={"image": "e:v1"}, precision="fp16").build()[
        "spec"
    ]
    assert spec["hardware"] == {"chip": "ascend910b", "npusPerNode": 16}
    assert spec["engine"] == {"type": "sglang", "image": "e:v1"}
    assert spec["precision"] == "fp16"
