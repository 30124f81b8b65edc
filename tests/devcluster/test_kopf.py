"""kopf runs against the local Kubernetes API: handlers, status writes, finalizers and events."""

from __future__ import annotations

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.testing import kopf_operator
from tests.devcluster.helpers import TEST_GROUP, create_widget


def widget_operator(deleted: list[str]) -> kopf.OperatorRegistry:
    """Handlers that mark a Widget as handled and note its deletion in ``deleted``."""
    registry = kopf.OperatorRegistry()

    @kopf.on.create(TEST_GROUP, "v1", "widgets", registry=registry)
    def on_create(body, spec, patch, **_):
        patch.status["observedColor"] = spec.get("color")
        patch.metadata.annotations[f"{TEST_GROUP}/handled"] = "yes"
        kopf.info(body, reason="Handled", message="Widget handled.")  # a v1 Event

    @kopf.on.delete(TEST_GROUP, "v1", "widgets", registry=registry)
    def on_delete(name, **_):
        deleted.append(name)

    return registry


@pytest.mark.parametrize("namespaces", [[], ["t-*"]], ids=["clusterwide", "namespace-pattern"])
def test_kopf_handles_a_custom_resource_and_its_deletion(
    dev_cluster, core, custom, widgets, test_namespace, namespaces
):
    # With a namespace pattern, kopf also lists and watches the namespaces themselves.
    deleted: list[str] = []
    with kopf_operator(dev_cluster.url, widget_operator(deleted), namespaces=namespaces):
        create_widget(custom, test_namespace, "w", spec={"color": "teal"})

        def handled() -> dict | None:
            widget = custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
            return widget if widget.get("status", {}).get("observedColor") == "teal" else None

        widget = wait_for(handled, what="the create handler to write the status")
        assert widget["metadata"]["annotations"][f"{TEST_GROUP}/handled"] == "yes"
        assert widget["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        wait_for(
            lambda: any(
                e.message == "Widget handled." for e in core.list_namespaced_event(test_namespace).items
            ),
            what="kopf's event",
        )

        custom.delete_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
        wait_for(lambda: _absent(custom, test_namespace, "w"), what="kopf to release its finalizer")
        assert deleted == ["w"]


def _absent(custom, namespace: str, name: str) -> bool:
    try:
        custom.get_namespaced_custom_object(TEST_GROUP, "v1", namespace, "widgets", name)
    except ApiException as e:
        return e.status == 404
    return False
