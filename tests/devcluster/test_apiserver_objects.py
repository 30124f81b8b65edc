"""Object semantics of the local Kubernetes API, through the official client over HTTP.

Each test covers a gap of plain kmock 0.8 (docs/decisions.md says what the emulator is for) and fails against it.
"""

from __future__ import annotations

import datetime
import json
import uuid

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from tests.devcluster.helpers import TEST_GROUP, create_widget, patch_widget


def status_of(error: ApiException) -> dict:
    return json.loads(error.body)


def test_core_group_discovery_says_v1(k8s_api):
    resources = kubernetes.client.CoreV1Api(k8s_api).get_api_resources()
    assert resources.group_version == "v1"
    assert {"pods", "pods/status", "namespaces", "configmaps", "events"} <= {
        r.name for r in resources.resources
    }


def test_namespaces_are_listed_cluster_wide(core, test_namespace):
    names = {namespace.metadata.name for namespace in core.list_namespace().items}
    assert {"default", "kube-system", test_namespace} <= names
    assert core.read_namespace(test_namespace).status.phase == "Active"


def test_create_assigns_server_metadata(core, test_namespace):
    created = core.create_namespaced_config_map(
        test_namespace, {"metadata": {"name": "a"}, "data": {"k": "v"}}
    )
    assert uuid.UUID(created.metadata.uid)
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation == 1
    age = datetime.datetime.now(datetime.UTC) - created.metadata.creation_timestamp
    assert datetime.timedelta(seconds=-2) < age < datetime.timedelta(seconds=5)


def test_generate_name_gives_a_unique_name(core, test_namespace):
    names = {
        core.create_namespaced_config_map(test_namespace, {"metadata": {"generateName": "cm-"}}).metadata.name
        for _ in range(3)
    }
    assert len(names) == 3 and all(name.startswith("cm-") and len(name) == 8 for name in names)


def test_every_write_gets_a_new_higher_resource_version(core, custom, widgets, test_namespace):
    created = create_widget(custom, test_namespace, "w", spec={"size": {"replicas": 1}})
    spec_patched = patch_widget(custom, test_namespace, "w", {"spec": {"color": "red"}})
    core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "elsewhere"}})
    status_patched = patch_widget(custom, test_namespace, "w", {"status": {"phase": "Up"}}, status=True)
    versions = [int(obj["metadata"]["resourceVersion"]) for obj in (created, spec_patched, status_patched)]
    assert versions[0] < versions[1] < versions[2] - 1  # one global counter: the ConfigMap took one too
    fetched = custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    assert fetched["metadata"]["resourceVersion"] == status_patched["metadata"]["resourceVersion"]


def test_generation_follows_the_spec_only(custom, widgets, test_namespace):
    assert (
        create_widget(custom, test_namespace, "w", spec={"size": {"replicas": 1}})["metadata"]["generation"]
        == 1
    )
    labelled = patch_widget(custom, test_namespace, "w", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    status = patch_widget(custom, test_namespace, "w", {"status": {"phase": "Up"}}, status=True)
    assert status["metadata"]["generation"] == 1
    assert (
        patch_widget(custom, test_namespace, "w", {"spec": {"color": "red"}})["metadata"]["generation"] == 2
    )


def test_a_write_that_changes_nothing_keeps_the_resource_version(custom, widgets, test_namespace):
    created = create_widget(custom, test_namespace, "w", spec={"color": "red"})
    same = patch_widget(custom, test_namespace, "w", {"spec": {"color": "red"}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_lists_carry_kind_api_version_and_resource_version(custom, widgets, test_namespace):
    created = create_widget(custom, test_namespace, "w")
    listing = custom.list_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets")
    assert (listing["kind"], listing["apiVersion"]) == ("WidgetList", f"{TEST_GROUP}/v1")
    assert int(listing["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    assert [item["metadata"]["name"] for item in listing["items"]] == ["w"]


LABELS = {
    "a": {"tier": "web", "env": "prod"},
    "b": {"tier": "db", "env": "prod"},
    "c": {"tier": "web"},
    "d": {},
}
LABEL_SELECTIONS = {
    "tier=web": {"a", "c"},
    "tier==web": {"a", "c"},
    "tier!=web": {"b", "d"},
    "tier in (web,db)": {"a", "b", "c"},
    "tier notin (web)": {"b", "d"},
    "env": {"a", "b"},
    "!env": {"c", "d"},
    "tier=web,env=prod": {"a"},
    "": {"a", "b", "c", "d"},
}


def test_label_selectors_filter_lists(core, test_namespace):
    for name, labels in LABELS.items():
        core.create_namespaced_config_map(test_namespace, {"metadata": {"name": name, "labels": labels}})
    for selector, expected in LABEL_SELECTIONS.items():
        listing = core.list_namespaced_config_map(test_namespace, label_selector=selector)
        assert {cm.metadata.name for cm in listing.items} == expected, selector


def test_field_selectors_filter_lists(core, test_namespace):
    for name in ("a", "b"):
        core.create_namespaced_config_map(test_namespace, {"metadata": {"name": name}})
    assert [
        cm.metadata.name
        for cm in core.list_namespaced_config_map(test_namespace, field_selector="metadata.name=a").items
    ] == ["a"]
    assert [
        cm.metadata.name
        for cm in core.list_namespaced_config_map(test_namespace, field_selector="metadata.name!=a").items
    ] == ["b"]
    everywhere = core.list_config_map_for_all_namespaces(
        field_selector=f"metadata.namespace={test_namespace}"
    )
    assert {cm.metadata.name for cm in everywhere.items} == {"a", "b"}


def test_a_malformed_selector_is_a_bad_request(core, test_namespace):
    with pytest.raises(ApiException) as error:
        core.list_namespaced_config_map(test_namespace, label_selector="tier in (web")
    assert error.value.status == 400


def test_put_replaces_and_a_stale_resource_version_conflicts(core, test_namespace):
    original = core.create_namespaced_config_map(
        test_namespace, {"metadata": {"name": "a"}, "data": {"k": "v"}}
    )
    original.data = {"k": "new"}
    replaced = core.replace_namespaced_config_map("a", test_namespace, original)
    assert replaced.data == {"k": "new"}
    assert int(replaced.metadata.resource_version) > int(original.metadata.resource_version)
    original.data = {"k": "lost update"}
    with pytest.raises(ApiException) as error:
        core.replace_namespaced_config_map("a", test_namespace, original)  # still the first resourceVersion
    assert error.value.status == 409 and status_of(error.value)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("a", test_namespace).data == {"k": "new"}


def test_a_stale_resource_version_in_a_merge_patch_conflicts(custom, widgets, test_namespace):
    created = create_widget(custom, test_namespace, "w")
    patch_widget(custom, test_namespace, "w", {"spec": {"color": "red"}})
    with pytest.raises(ApiException) as error:
        stale = {
            "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
            "spec": {"color": "blue"},
        }
        patch_widget(custom, test_namespace, "w", stale)
    assert error.value.status == 409


def test_status_subresource_is_isolated_from_the_main_resource(custom, widgets, test_namespace):
    created = create_widget(custom, test_namespace, "w", spec={"color": "red"}, status={"phase": "Forged"})
    assert "status" not in created  # a create never sets a status subresource's status
    patch_widget(custom, test_namespace, "w", {"status": {"phase": "Up"}}, status=True)
    main = patch_widget(
        custom, test_namespace, "w", {"spec": {"color": "blue"}, "status": {"phase": "Forged"}}
    )
    assert (main["spec"]["color"], main["status"]["phase"]) == ("blue", "Up")
    status = patch_widget(
        custom, test_namespace, "w", {"spec": {"color": "green"}, "status": {"phase": "Down"}}, status=True
    )
    assert (status["spec"]["color"], status["status"]["phase"]) == ("blue", "Down")
    status["status"] = {"phase": "Replaced"}
    status["spec"] = {"color": "ignored"}
    replaced = custom.replace_namespaced_custom_object_status(
        TEST_GROUP, "v1", test_namespace, "widgets", "w", status
    )
    assert (replaced["spec"]["color"], replaced["status"]["phase"]) == ("blue", "Replaced")


def test_json_patch_applies_and_a_failed_test_is_unprocessable(custom, widgets, test_namespace):
    created = create_widget(custom, test_namespace, "w", metadata={"name": "w", "finalizers": ["x/y", "x/z"]})
    version = created["metadata"]["resourceVersion"]
    patch_widget(
        custom, test_namespace, "w", [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    )
    stale = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    with pytest.raises(ApiException) as error:
        patch_widget(custom, test_namespace, "w", stale)
    assert error.value.status == 422
    current = custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    fresh = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": current["metadata"]["resourceVersion"]},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    assert patch_widget(custom, test_namespace, "w", fresh)["metadata"]["finalizers"] == ["x/z"]


def test_strategic_merge_patch_merges_containers_by_name(core, test_namespace):
    containers = [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]
    core.create_namespaced_pod(
        test_namespace, {"metadata": {"name": "p"}, "spec": {"containers": containers}}
    )
    patched = core.patch_namespaced_pod(
        "p",
        test_namespace,
        {"spec": {"containers": [{"name": "b", "image": "b:2"}]}},
        _content_type="application/strategic-merge-patch+json",
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "a:1"), ("b", "b:2")]


def test_strategic_merge_patch_of_a_custom_resource_is_refused_as_by_a_real_server(
    custom, widgets, test_namespace
):
    create_widget(custom, test_namespace, "w")
    with pytest.raises(ApiException) as error:
        custom.patch_namespaced_custom_object(
            TEST_GROUP,
            "v1",
            test_namespace,
            "widgets",
            "w",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert error.value.status == 415


def test_errors_are_status_objects_with_the_right_reason(core, test_namespace):
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("nope", test_namespace)
    core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_config_map(test_namespace, {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as invalid:
        core.create_namespace({"metadata": {"name": "Not_A_Label"}})
    with pytest.raises(ApiException) as nowhere:
        core.create_namespaced_config_map("no-such-namespace", {"metadata": {"name": "a"}})
    for error, code, reason in (
        (missing, 404, "NotFound"),
        (duplicate, 409, "AlreadyExists"),
        (invalid, 422, "Invalid"),
        (nowhere, 404, "NotFound"),
    ):
        status = status_of(error.value)
        assert (error.value.status, status["kind"], status["code"], status["reason"]) == (
            code,
            "Status",
            code,
            reason,
        )
    assert status_of(missing.value)["message"] == 'configmaps "nope" not found'


def test_events_of_both_api_groups_can_be_created_and_listed(k8s_api, core, test_namespace):
    involved = {"kind": "Pod", "name": "p", "namespace": test_namespace}
    core.create_namespaced_event(
        test_namespace,
        {
            "metadata": {"generateName": "p."},
            "involvedObject": involved,
            "reason": "Started",
            "message": "hi",
            "type": "Normal",
        },
    )
    events_api = kubernetes.client.EventsV1Api(k8s_api)
    events_api.create_namespaced_event(
        test_namespace,
        {
            "metadata": {"name": "e2"},
            "regarding": involved,
            "reason": "Scaled",
            "note": "up",
            "type": "Normal",
            "eventTime": "2025-01-01T00:00:00.000000Z",
            "action": "Scale",
            "reportingController": "test",
            "reportingInstance": "test-1",
        },
    )
    assert [e.reason for e in core.list_namespaced_event(test_namespace).items] == ["Started"]
    assert [e.reason for e in events_api.list_namespaced_event(test_namespace).items] == ["Scaled"]
