"""Engine pods on the real API server: Pod Security "restricted" admits them, templates included; it refuses
the hostPath driver mounts of nodes without the Ascend Docker Runtime, as docs/engines.md says."""

from __future__ import annotations

import uuid

import pytest

from ascend_fleet.kube import KubeError
from ascend_fleet.render import render_all, validate
from tests.support.documents import inference

pytestmark = pytest.mark.e2e

TEMPLATE = {
    "metadata": {"labels": {"team": "search"}},
    "spec": {
        "imagePullSecrets": [{"name": "registry"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "accelerator-type", "operator": "In", "values": ["module-910b-8"]}
                            ]
                        }
                    ]
                }
            }
        },
        "containers": [{"name": "engine", "env": [{"name": "HCCL_BUFFSIZE", "value": "512"}]}],
    },
}


def objects(namespace: str, **spec) -> list[dict]:
    doc = (
        inference(f"e{uuid.uuid4().hex[:6]}").namespace(namespace).engine("vllm-ascend").spec(**spec).build()
    )
    return [o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"]


@pytest.fixture
def restricted_namespace(real_cluster):
    name = real_cluster.create_namespace(
        f"restricted-{uuid.uuid4().hex[:6]}", labels={"pod-security.kubernetes.io/enforce": "restricted"}
    )
    yield name
    real_cluster.kube.delete_namespace(name)


def dry_run_create(kube, pod: dict) -> dict:
    created = kube.create(pod, exist_ok=False, dry_run=True, strict=True)
    assert created is not None
    return created


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {
            "engine": {"type": "sglang"},
            "parallelism": {"tensor": 8, "pipeline": 2},
            "scheduling": {"priority": True},
        },
        {"parallelism": {"tensor": 8, "pipeline": 2}, "template": TEMPLATE},
        {"hardware": {"chip": "ascend910_93"}, "precision": "int8", "memory": {"expandableSegments": False}},
    ],
    ids=["vllm", "sglang-multi-pod", "vllm-template", "a3-int8"],
)
def test_restricted_namespaces_admit_engine_pods(real_cluster, restricted_namespace, spec):
    for pod in objects(restricted_namespace, **spec):
        created = dry_run_create(real_cluster.kube, pod)
        assert created["spec"]["securityContext"]["runAsNonRoot"] is True
        assert created["spec"]["automountServiceAccountToken"] is False


def test_restricted_refuses_the_host_driver_mounts(real_cluster, restricted_namespace):
    (pod,) = objects(restricted_namespace, hardware={"ascendRuntime": False})
    with pytest.raises(KubeError) as refused:
        dry_run_create(real_cluster.kube, pod)
    assert refused.value.status == 403 and "hostPath" in str(refused.value)
