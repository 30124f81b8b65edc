"""Test data shared by the local Kubernetes API tests."""

from __future__ import annotations

import kubernetes.client
import pytest

from ascend_fleet_dev.testing import KUBECTL

TEST_GROUP = "test.ascendfleet.io"
MERGE = "application/merge-patch+json"

requires_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def widget_crd(
    *,
    plural: str = "widgets",
    kind: str = "Widget",
    scope: str = "Namespaced",
    subresources: dict | None = None,
    printer_columns: list[dict] | None = None,
) -> dict:
    """A small CRD in the test group, with the status and scale subresources unless told otherwise."""
    version = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "subresources": subresources
        if subresources is not None
        else {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.size.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
    }
    if printer_columns is not None:
        version["additionalPrinterColumns"] = printer_columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{TEST_GROUP}"},
        "spec": {
            "group": TEST_GROUP,
            "scope": scope,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "shortNames": [kind.lower()[:3]],
            },
            "versions": [version],
        },
    }


def create_widget(
    custom: kubernetes.client.CustomObjectsApi, namespace: str, name: str, **body: object
) -> dict:
    """Create a Widget (the test CRD must be registered) and return it."""
    widget = {"apiVersion": f"{TEST_GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, **body}
    return custom.create_namespaced_custom_object(TEST_GROUP, "v1", namespace, "widgets", widget)


def patch_widget(
    custom: kubernetes.client.CustomObjectsApi,
    namespace: str,
    name: str,
    patch: object,
    *,
    status: bool = False,
) -> dict:
    """Merge-patch a Widget (JSON-patch if ``patch`` is a list), or its status."""
    method = custom.patch_namespaced_custom_object_status if status else custom.patch_namespaced_custom_object
    content_type = "application/json-patch+json" if isinstance(patch, list) else MERGE
    return method(TEST_GROUP, "v1", namespace, "widgets", name, patch, _content_type=content_type)


def leader_pod(
    namespace: str,
    name: str,
    ip: str,
    command: list[str],
    *,
    inference: str = "qwen",
    replica: int = 0,
    npus: int = 8,
) -> dict:
    """A single-pod replica's leader as the operator renders it, reduced to what the simulated engines read."""
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "inference.ascendfleet.io/name": inference,
                "inference.ascendfleet.io/replica": str(replica),
                "inference.ascendfleet.io/rank": "0",
                "inference.ascendfleet.io/role": "leader",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "command": command,
                    "ports": [{"name": "npu-metrics", "containerPort": 9410}],
                    "resources": {"limits": {"huawei.com/Ascend910": str(npus)}},
                }
            ]
        },
        "status": {"phase": "Running", "podIP": ip},
    }
