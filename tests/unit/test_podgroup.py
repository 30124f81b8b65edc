"""Volcano PodGroups: the queue from the object's annotation, and every pod's full requests in minResources."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ascend_fleet.render import Owner, validate
from ascend_fleet.render.children import render_replica
from ascend_fleet.render.podgroup import format_quantity, min_resources, pod_requests
from tests.support.documents import RESTRICTED
from tests.unit.test_render import spec_doc

VOLCANO = {"schedulerName": "volcano"}


def group_of(doc: dict) -> dict:
    valid = validate(doc)
    objects = render_replica(valid.obj.spec, Owner.of(valid.obj), 0, valid.layout)
    (group,) = [o for o in objects if o["kind"] == "PodGroup"]
    return group


def test_queue_comes_from_volcanos_annotation_on_the_object():
    doc = spec_doc(parallelism={"tensor": 8, "pipeline": 2}, scheduling=VOLCANO)
    assert "queue" not in group_of(doc)["spec"]  # Volcano then puts it in its default queue
    doc["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "inference"}
    assert group_of(doc)["spec"]["queue"] == "inference"


def test_min_resources_are_the_engine_resources_of_every_pod_of_the_gang():
    doc = spec_doc(
        parallelism={"tensor": 8, "pipeline": 4},
        scheduling=VOLCANO,
        engine={
            "type": "vllm-ascend",
            "resources": {"requests": {"cpu": "30500m", "memory": "200Gi"}, "limits": {"memory": "200Gi"}},
        },
    )
    spec = group_of(doc)["spec"]
    assert spec["minMember"] == 4
    assert spec["minResources"] == {"cpu": "122", "huawei.com/Ascend910": "32", "memory": "800Gi"}


def test_containers_a_template_adds_count_too():
    sidecar = {
        "name": "log",
        "image": "x",
        "securityContext": RESTRICTED,
        "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}},
    }
    single = group_of(spec_doc(scheduling=VOLCANO))["spec"]["minResources"]
    with_sidecar = group_of(spec_doc(scheduling=VOLCANO, template={"spec": {"containers": [sidecar]}}))
    assert single == {"cpu": "4", "huawei.com/Ascend910": "1", "memory": "48Gi"}
    assert with_sidecar["spec"]["minResources"] == {
        "cpu": "4500m",
        "huawei.com/Ascend910": "1",
        "memory": "49216Mi",
    }


def test_pod_requests_follow_the_schedulers_rules():
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "250m"}}},
            ],
            "initContainers": [
                {"resources": {"requests": {"cpu": "4", "memory": "512Mi"}}},  # runs alone, first
                {"restartPolicy": "Always", "resources": {"requests": {"memory": "256Mi"}}},  # a sidecar
            ],
            "overhead": {"memory": "64Mi"},
        }
    }
    # A limit-only memory is requested at the limit; the ordinary init container's 4 CPUs exceed the
    # containers' 1.25; the sidecar adds its memory; the overhead adds to everything.
    assert pod_requests(pod) == {"cpu": Decimal(4), "memory": Decimal(1344 * 2**20)}
    assert min_resources([pod, pod]) == {"cpu": "8", "memory": "2688Mi"}


@pytest.mark.parametrize(
    "value, text",
    [
        ("144Gi", "144Gi"),
        ("16", "16"),
        ("0.5", "500m"),
        ("1.5Gi", "1536Mi"),
        ("1000", "1000"),
        ("1e-9", "1n"),
    ],
)
def test_quantities_are_written_exactly_and_short(value, text):
    from ascend_fleet.api.k8s import parse_quantity

    assert format_quantity(parse_quantity(value)) == text
