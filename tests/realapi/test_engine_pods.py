"""Engine pods on the real API server: Pod Security "restricted" admits them (every example's pods, templates
and a permitted sidecar included); it refuses the hostPath driver mounts of nodes without the Ascend Docker
Runtime, as docs/engines.md says, and what our restricted check refuses before any pod is tried."""

from __future__ import annotations

import uuid

import pytest
import yaml

from ascend_fleet.kube import KubeError
from ascend_fleet.render import InvalidSpec, render_all, validate
from tests.support.documents import RESTRICTED, inference
from tests.support.paths import EXAMPLES

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
        {
            "disaggregation": {
                "prefill": {"parallelism": {"tensor": 4}},
                "decode": {"parallelism": {"tensor": 2, "data": 2}},
                "placement": {"mode": "required", "topologyKey": "example.com/super-pod"},
            }
        },
    ],
    ids=["vllm", "sglang-multi-pod", "vllm-template", "a3-int8", "pd-required-placement"],
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


def example_pods(namespace: str) -> list[tuple[str, dict]]:
    """Every pod every example renders (each replica, each role), moved into ``namespace``."""
    found = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "AscendInference":
                continue
            doc["metadata"]["namespace"] = namespace
            for pod in (o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"):
                found.append((f"{path.name}/{pod['metadata']['name']}", pod))
    return found


def test_pod_security_restricted_admits_every_pod_of_every_example(real_cluster, restricted_namespace):
    pods = example_pods(restricted_namespace)
    assert len(pods) >= len(EXAMPLES)
    for label, pod in pods:
        try:
            dry_run_create(real_cluster.kube, pod)
        except KubeError as refused:  # pragma: no cover - the failure names the pod
            pytest.fail(f"{label}: {refused}")


SIDECAR_TEMPLATE = {
    "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/log": "runtime/default"}},
    "spec": {
        "initContainers": [{"name": "warm", "image": "busybox", "securityContext": RESTRICTED}],
        "containers": [
            {
                "name": "log",
                "image": "fluent/fluent-bit:3.0",
                "securityContext": {
                    **RESTRICTED,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                },
                "volumeMounts": [{"name": "buffer", "mountPath": "/buffer"}],
            }
        ],
        "volumes": [{"name": "buffer", "emptyDir": {}}],
        "securityContext": {"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]},
    },
}


def test_a_fleet_with_a_permitted_sidecar_is_admitted(real_cluster, restricted_namespace):
    for pod in objects(
        restricted_namespace, parallelism={"tensor": 8, "pipeline": 2}, template=SIDECAR_TEMPLATE
    ):
        created = dry_run_create(real_cluster.kube, pod)
        assert [c["name"] for c in created["spec"]["containers"]] == ["engine", "log"]


@pytest.mark.parametrize(
    "container",
    [
        {
            "name": "miner",
            "image": "busybox",
            "securityContext": {"privileged": True, "capabilities": {"drop": ["ALL"]}},
        },
        {
            "name": "miner",
            "image": "busybox",
            "securityContext": {**RESTRICTED, "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}},
        },
        {"name": "miner", "image": "busybox"},
    ],
    ids=["privileged", "sys-admin", "no-context"],
)
def test_our_check_refuses_what_pod_security_refuses(real_cluster, restricted_namespace, container):
    doc = (
        inference(f"e{uuid.uuid4().hex[:6]}")
        .namespace(restricted_namespace)
        .engine("vllm-ascend")
        .spec(template={"spec": {"containers": [container]}})
        .build()
    )
    with pytest.raises(InvalidSpec, match="Pod Security"):
        validate(doc)
    # The same pod, rendered past the check, is refused by the API server's PodSecurity admission too.
    plain = validate({**doc, "spec": {k: v for k, v in doc["spec"].items() if k != "template"}})
    (pod,) = [o for o in render_all(plain.obj) if o["kind"] == "Pod"]
    pod["spec"]["containers"].append(container)
    with pytest.raises(KubeError) as refused:
        dry_run_create(real_cluster.kube, pod)
    # PodSecurity answers 403; this control plane, started without --allow-privileged, refuses a privileged
    # container earlier, in the Pod's own validation (422).
    message = str(refused.value)
    assert (refused.value.status == 403 and 'violates PodSecurity "restricted' in message) or (
        refused.value.status == 422 and "privileged: Forbidden" in message
    ), message
