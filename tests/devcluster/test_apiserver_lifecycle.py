"""Deletion, garbage collection, CRDs and the scale subresource of the local Kubernetes API."""

from __future__ import annotations

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from tests.devcluster.helpers import TEST_GROUP, create_widget, patch_widget, widget_crd


def owner_reference(metadata) -> dict:
    """A reference to the owner whose metadata (a client model or a dict) is given."""
    if isinstance(metadata, dict):
        return {"apiVersion": "v1", "kind": "Thing", "name": metadata["name"], "uid": metadata["uid"]}
    return {"apiVersion": "v1", "kind": "Thing", "name": metadata.name, "uid": metadata.uid}


def names(core, namespace: str) -> set[str]:
    return {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}


def test_deleting_an_object_with_finalizers_waits_for_them(custom, widgets, test_namespace):
    create_widget(
        custom, test_namespace, "w", metadata={"name": "w", "finalizers": ["test/first", "test/second"]}
    )
    custom.delete_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    terminating = custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    assert terminating["metadata"]["deletionTimestamp"]
    patch_widget(custom, test_namespace, "w", {"metadata": {"finalizers": ["test/second"]}})
    assert custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    patch_widget(custom, test_namespace, "w", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as error:
        custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    assert error.value.status == 404


def test_deleting_an_owner_deletes_its_dependents_in_cascade(core, custom, widgets, test_namespace):
    owner = create_widget(custom, test_namespace, "owner")
    child = core.create_namespaced_config_map(
        test_namespace,
        {"metadata": {"name": "child", "ownerReferences": [owner_reference(owner["metadata"])]}},
    )
    core.create_namespaced_config_map(
        test_namespace,
        {"metadata": {"name": "grandchild", "ownerReferences": [owner_reference(child.metadata)]}},
    )
    core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "unrelated"}})
    custom.delete_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "owner")
    assert names(core, test_namespace) == {"unrelated"}


def test_a_dependent_with_another_live_owner_only_loses_the_reference(core, test_namespace):
    first = core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "first"}})
    second = core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "second"}})
    references = [owner_reference(first.metadata), owner_reference(second.metadata)]
    core.create_namespaced_config_map(
        test_namespace, {"metadata": {"name": "shared", "ownerReferences": references}}
    )
    core.delete_namespaced_config_map("first", test_namespace)
    shared = core.read_namespaced_config_map("shared", test_namespace)
    assert [reference.name for reference in shared.metadata.owner_references] == ["second"]


def test_orphan_propagation_keeps_dependents(core, test_namespace):
    owner = core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        test_namespace, {"metadata": {"name": "child", "ownerReferences": [owner_reference(owner.metadata)]}}
    )
    core.delete_namespaced_config_map("owner", test_namespace, propagation_policy="Orphan")
    child = core.read_namespaced_config_map("child", test_namespace)
    assert not child.metadata.owner_references


def test_a_dependent_with_finalizers_waits_for_them_when_its_owner_goes(core, test_namespace):
    owner = core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "owner"}})
    child = {
        "name": "child",
        "ownerReferences": [owner_reference(owner.metadata)],
        "finalizers": ["test/keep"],
    }
    core.create_namespaced_config_map(test_namespace, {"metadata": child})
    core.delete_namespaced_config_map("owner", test_namespace)
    assert core.read_namespaced_config_map("child", test_namespace).metadata.deletion_timestamp


def test_deleting_a_namespace_deletes_its_objects(core, test_namespace):
    core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "a"}})
    core.delete_namespace(test_namespace)
    assert test_namespace not in {namespace.metadata.name for namespace in core.list_namespace().items}
    assert (
        core.list_config_map_for_all_namespaces(field_selector=f"metadata.namespace={test_namespace}").items
        == []
    )


def test_a_crd_makes_its_resource_discoverable_and_usable_until_deleted(k8s_api, custom, test_namespace):
    extensions = kubernetes.client.ApiextensionsV1Api(k8s_api)
    crd = widget_crd(plural="gadgets", kind="Gadget", scope="Cluster", subresources={"status": {}})
    created = extensions.create_custom_resource_definition(crd)
    established = {condition.type: condition.status for condition in created.status.conditions}
    assert established["Established"] == "True"
    group_api = kubernetes.client.ApisApi(k8s_api).get_api_versions()
    assert TEST_GROUP in {group.name for group in group_api.groups}
    resources = kubernetes.client.CustomObjectsApi(k8s_api).get_api_resources(TEST_GROUP, "v1")
    gadgets = {resource.name: resource for resource in resources.resources}
    assert (gadgets["gadgets"].kind, gadgets["gadgets"].namespaced) == ("Gadget", False)
    assert gadgets["gadgets"].short_names == ["gad"] and "gadgets/status" in gadgets
    custom.create_cluster_custom_object(TEST_GROUP, "v1", "gadgets", {"metadata": {"name": "g"}, "spec": {}})
    assert custom.get_cluster_custom_object(TEST_GROUP, "v1", "gadgets", "g")["kind"] == "Gadget"

    extensions.delete_custom_resource_definition(crd["metadata"]["name"])
    resources = kubernetes.client.CustomObjectsApi(k8s_api).get_api_resources(TEST_GROUP, "v1")
    assert "gadgets" not in {resource.name for resource in resources.resources}
    with pytest.raises(ApiException) as error:
        custom.get_cluster_custom_object(TEST_GROUP, "v1", "gadgets", "g")
    assert error.value.status == 404


def test_an_invalid_crd_is_rejected(k8s_api):
    crd = widget_crd(plural="things", kind="Thing")
    crd["metadata"]["name"] = "wrong-name"
    with pytest.raises(ApiException) as error:
        kubernetes.client.ApiextensionsV1Api(k8s_api).create_custom_resource_definition(crd)
    assert error.value.status == 422


def test_scale_subresource_reads_and_writes_the_crd_paths(custom, widgets, test_namespace):
    create_widget(custom, test_namespace, "w", spec={"size": {"replicas": 2}})
    patch_widget(custom, test_namespace, "w", {"status": {"replicas": 1, "selector": "app=w"}}, status=True)
    scale = custom.get_namespaced_custom_object_scale(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert (scale["spec"]["replicas"], scale["status"]) == (2, {"replicas": 1, "selector": "app=w"})

    patched = custom.patch_namespaced_custom_object_scale(
        TEST_GROUP,
        "v1",
        test_namespace,
        "widgets",
        "w",
        {"spec": {"replicas": 5}},
        _content_type="application/merge-patch+json",
    )
    assert patched["spec"]["replicas"] == 5
    widget = custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    assert (widget["spec"]["size"]["replicas"], widget["metadata"]["generation"]) == (5, 2)

    patched["spec"]["replicas"] = 3
    replaced = custom.replace_namespaced_custom_object_scale(
        TEST_GROUP, "v1", test_namespace, "widgets", "w", patched
    )
    assert replaced["spec"]["replicas"] == 3
    with pytest.raises(ApiException) as error:  # `patched` now holds a stale resourceVersion
        custom.replace_namespaced_custom_object_scale(
            TEST_GROUP, "v1", test_namespace, "widgets", "w", patched
        )
    assert error.value.status == 409
