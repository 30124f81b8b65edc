"""The pure API-server semantics behind the local API: selectors, patch flavours, version order, paths."""

from __future__ import annotations

import pytest

from ascend_fleet_dev.emulator.patches import (
    PatchError,
    apply_patch,
    merge_patch,
    strategic_merge_patch,
)
from ascend_fleet_dev.emulator.request import parse_api_path
from ascend_fleet_dev.emulator.resources import preferred_version
from ascend_fleet_dev.emulator.selectors import FieldSelector, LabelSelector, SelectorError


def test_label_selectors_round_trip_and_compare_numbers():
    selector = LabelSelector.parse("tier in (web, db),!canary,replica>1")
    assert str(selector) == "tier in (web,db),!canary,replica>1"
    assert selector.matches({"tier": "web", "replica": "2"})
    assert not selector.matches({"tier": "web", "replica": "1"})
    assert not selector.matches({"tier": "web", "replica": "2", "canary": ""})


def test_a_selector_object_becomes_the_text_a_scale_reports():
    selector = LabelSelector.from_object(
        {
            "matchLabels": {"app": "x"},
            "matchExpressions": [{"key": "role", "operator": "In", "values": ["leader"]}],
        }
    )
    assert str(selector) == "app=x,role in (leader)"


@pytest.mark.parametrize("text", ["a in (b", "a > b", "=b", "a b"])
def test_malformed_label_selectors_are_refused(text):
    with pytest.raises(SelectorError):
        LabelSelector.parse(text)


def test_field_selectors_read_nested_fields_and_escaped_values():
    selector = FieldSelector.parse(r"status.phase=Running,metadata.name!=a\,b")
    assert selector.matches({"metadata": {"name": "c"}, "status": {"phase": "Running"}})
    assert not selector.matches({"metadata": {"name": "a,b"}, "status": {"phase": "Running"}})


def test_merge_patch_replaces_lists_and_deletes_with_null():
    merged = merge_patch(
        {"a": {"b": 1, "c": 2}, "l": [1, 2], "s": "x"}, {"a": {"b": None}, "l": [3], "s": {"k": 1}}
    )
    assert merged == {"a": {"c": 2}, "l": [3], "s": {"k": 1}}


def test_strategic_merge_patch_directives():
    pod = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "args": ["x", "y"],
        },
    }
    patch = {
        "metadata": {"finalizers": ["b"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "$patch": "delete"}, {"name": "c", "image": "2"}],
            "volumes": [{"name": "v", "hostPath": {"path": "/x"}, "$retainKeys": ["name", "hostPath"]}],
            "$deleteFromPrimitiveList/args": ["x"],
        },
    }
    patched = strategic_merge_patch(pod, patch)
    assert patched["metadata"]["finalizers"] == ["a", "b"]
    assert patched["spec"]["containers"] == [{"name": "b", "image": "1"}, {"name": "c", "image": "2"}]
    assert patched["spec"]["volumes"] == [{"name": "v", "hostPath": {"path": "/x"}}]
    assert patched["spec"]["args"] == ["y"]
    assert pod["spec"]["containers"][0] == {"name": "a", "image": "1"}  # the original is untouched


def test_json_patch_failures_say_whether_the_request_was_malformed():
    with pytest.raises(PatchError) as failed:
        apply_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}], "json")
    assert not failed.value.malformed
    with pytest.raises(PatchError) as malformed:
        apply_patch({"a": 1}, {"op": "test"}, "json")
    assert malformed.value.malformed


def test_the_preferred_version_is_the_most_stable_newest_one():
    assert preferred_version(["v1beta1", "v1alpha2", "v1", "v2beta1"]) == "v1"
    assert preferred_version(["v1alpha1", "v1beta1"]) == "v1beta1"
    assert preferred_version(["v2alpha1", "v1alpha3"]) == "v2alpha1"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/namespaces", ("", "v1", "namespaces", None, None, None)),
        ("/api/v1/namespaces/ns", ("", "v1", "namespaces", None, "ns", None)),
        ("/api/v1/namespaces/ns/status", ("", "v1", "namespaces", None, "ns", "status")),
        ("/api/v1/namespaces/ns/pods", ("", "v1", "pods", "ns", None, None)),
        ("/api/v1/namespaces/ns/pods/p/status", ("", "v1", "pods", "ns", "p", "status")),
        ("/apis/apps/v1/deployments/", ("apps", "v1", "deployments", None, None, None)),
    ],
)
def test_api_paths_including_the_namespaces_kmock_cannot_parse(path, expected):
    parsed = parse_api_path(path)
    resource = parsed.resource
    assert resource is not None
    actual = (
        resource.group,
        resource.version,
        resource.plural,
        parsed.namespace,
        parsed.name,
        parsed.subresource,
    )
    assert actual == expected


def test_custom_resources_get_their_schema_defaults_like_on_an_api_server():
    from ascend_fleet_dev.emulator.resources import apply_schema_defaults

    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "layout": {
                        "type": "object",
                        "default": {},
                        "properties": {
                            "tensor": {"type": "integer", "default": 1},
                            "data": {"type": "integer", "default": 1},
                        },
                    },
                    "absent": {"type": "object", "properties": {"x": {"type": "integer", "default": 5}}},
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"weight": {"type": "integer", "default": 3}},
                        },
                    },
                },
            }
        },
    }
    obj = {"spec": {"layout": {"data": 4}, "items": [{}, {"weight": 1}]}}
    assert apply_schema_defaults(schema, obj) == {
        "spec": {"layout": {"tensor": 1, "data": 4}, "items": [{"weight": 3}, {"weight": 1}]}
    }
    assert apply_schema_defaults(schema, {"spec": {}}) == {"spec": {"layout": {"tensor": 1, "data": 1}}}
