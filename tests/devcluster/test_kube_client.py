"""Kube's public calls against the emulator: namespaces, subresources, events, cluster-scoped kinds,
dry-run creates and the request hook."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.kube import AlreadyExists, Kube, NotFound, Request
from ascend_fleet_dev.cluster import DevCluster
from ascend_fleet_dev.testing import api_client
from tests.support.corpus import cr


@pytest.fixture(scope="module")
def requests() -> list[Request]:
    return []


@pytest.fixture(scope="module")
def kube(requests: list[Request]) -> Iterator[Kube]:
    # A cluster of its own: the session's cluster must not have the project's CRD (test_printing applies it).
    with DevCluster(start_seconds=0.1, ready_seconds=0.1) as cluster:
        client = Kube(api_client(cluster.url), on_request=requests.append)
        client.create(crd())
        client.wait_served(names.KIND)
        yield client


@pytest.fixture()
def namespace(kube: Kube) -> str:
    name = f"k-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name, labels={"team": "serving"})
    return name


def inference(kube: Kube, namespace: str, name: str = "qwen") -> dict:
    doc = {**cr(name=name), "metadata": {"name": name, "namespace": namespace}}
    created = kube.create(doc, exist_ok=False)
    assert created is not None
    return created


def test_a_namespace_is_created_with_its_labels_and_deleted(kube):
    name = f"k-{uuid.uuid4().hex[:8]}"
    created = kube.create_namespace(name, labels={"pod-security.kubernetes.io/enforce": "restricted"})
    assert created is not None and created["metadata"]["name"] == name
    stored = kube.get("Namespace", None, name)
    assert stored["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    with pytest.raises(AlreadyExists):
        kube.create_namespace(name)
    assert kube.create_namespace(name, exist_ok=True) is None

    assert kube.delete_namespace(name, wait=True, timeout=10) is True
    with pytest.raises(NotFound):
        kube.get("Namespace", None, name)
    assert kube.delete_namespace(name) is False


def test_the_scale_and_status_subresources_are_read_patched_and_replaced(kube, namespace):
    inference(kube, namespace)
    scale = kube.get(names.KIND, namespace, "qwen", "scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1

    kube.patch(names.KIND, namespace, "qwen", {"spec": {"replicas": 3}}, "scale")
    assert kube.get(names.KIND, namespace, "qwen")["spec"]["parallelism"]["data"] == 3

    scale = kube.get(names.KIND, namespace, "qwen", "scale")
    scale["spec"]["replicas"] = 2
    kube.replace(names.KIND, namespace, "qwen", scale, "scale")
    assert kube.get(names.KIND, namespace, "qwen", "scale")["spec"]["replicas"] == 2

    kube.patch(names.KIND, namespace, "qwen", {"status": {"replicas": 2}}, "status")
    status = kube.get(names.KIND, namespace, "qwen", "status")
    assert status["status"]["replicas"] == 2
    status["status"]["readyReplicas"] = 1
    kube.replace(names.KIND, namespace, "qwen", status, "status")
    assert kube.get(names.KIND, namespace, "qwen")["status"]["readyReplicas"] == 1


def test_events_are_listed_for_a_namespace_or_one_object(kube, namespace):
    first, second = inference(kube, namespace, "first"), inference(kube, namespace, "second")
    kube.event(first, "Normal", "Created", "about the first")
    kube.event(second, "Warning", "Refused", "about the second")

    assert {e["reason"] for e in kube.list_events(namespace)} == {"Created", "Refused"}
    (only,) = kube.list_events(namespace, regarding=second)
    assert (only["reason"], only["message"]) == ("Refused", "about the second")


def test_cluster_scoped_objects_have_paths_without_a_namespace(kube):
    name = f"pv-{uuid.uuid4().hex[:6]}"
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "hostPath": {"path": "/m"}},
    }
    assert kube.create(volume, exist_ok=False) is not None
    assert kube.get("PersistentVolume", None, name)["spec"]["capacity"] == {"storage": "1Gi"}
    assert name in {v["metadata"]["name"] for v in kube.list("PersistentVolume", None)}
    served = kube.get("CustomResourceDefinition", None, f"{names.PLURAL}.{names.GROUP}")
    assert served["spec"]["names"]["kind"] == names.KIND
    assert kube.delete("PersistentVolume", None, name) is True
    assert kube.delete("PersistentVolume", None, name) is False


def test_a_dry_run_create_answers_without_storing(kube, namespace, requests):
    doc = {**cr(name="dry"), "metadata": {"name": "dry", "namespace": namespace}}
    requests.clear()
    answer = kube.create(doc, exist_ok=False, dry_run=True, strict=True)
    assert answer is not None and answer["metadata"]["name"] == "dry"
    with pytest.raises(NotFound):
        kube.get(names.KIND, namespace, "dry")
    assert requests[0].query == [("dryRun", "All"), ("fieldValidation", "Strict")]


def test_the_request_hook_sees_each_request_with_its_status_and_duration(kube, namespace, requests):
    requests.clear()
    inference(kube, namespace)
    with pytest.raises(NotFound):
        kube.get(names.KIND, namespace, "missing")
    with pytest.raises(AlreadyExists):
        inference(kube, namespace)

    path = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}"
    assert [(r.method, r.path, r.status) for r in requests] == [
        ("POST", path, 201),
        ("GET", f"{path}/missing", 404),
        ("POST", path, 409),
    ]
    assert requests[0].body["metadata"]["name"] == "qwen"
    assert all(r.seconds >= 0 for r in requests)


def test_the_reconcile_bench_counts_requests_through_the_hook(kube, namespace):
    from bench.reconcile.operator_side import CountingKube

    counting = CountingKube(kube)
    inference(counting, namespace)
    counting.patch(names.KIND, namespace, "qwen", {"status": {"replicas": 1}}, "status")
    with pytest.raises(AlreadyExists):
        inference(counting, namespace)

    assert counting.take() == {f"POST {names.PLURAL}": 2, f"PATCH {names.PLURAL}/status": 1}
    statuses = counting.take_statuses()
    assert (statuses["objects"], statuses["writes"], statuses["conflicts"]) == (1, 1, 0)


def test_a_namespaced_object_without_a_namespace_is_not_posted(kube, requests):
    requests.clear()
    with pytest.raises(KeyError, match="namespace"):
        kube.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nowhere"}})
    assert requests == []
