"""What ``kubectl get`` shows: server-side Tables from printer columns, and real kubectl against the API."""

from __future__ import annotations

import datetime
import json
import urllib.request
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.emulator import tables
from ascend_fleet_dev.testing import kubectl
from tests.devcluster.helpers import TEST_GROUP, create_widget, requires_kubectl, widget_crd

ROOT = Path(__file__).resolve().parents[2]
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# What kubectl 1.3x sends for `kubectl get`.
TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
    "application/json"
)
COLUMNS = [
    {"name": "Tensor", "type": "integer", "jsonPath": ".spec.parallelism.tensor"},
    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Zone", "type": "string", "jsonPath": ".spec.zone", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


@pytest.fixture(scope="module")
def gizmos(k8s_api: kubernetes.client.ApiClient) -> str:
    crd = widget_crd(plural="gizmos", kind="Gizmo", subresources={"status": {}}, printer_columns=COLUMNS)
    kubernetes.client.ApiextensionsV1Api(k8s_api).create_custom_resource_definition(crd)
    return "gizmos"


def get_table(url: str, path: str) -> dict:
    request = urllib.request.Request(url + path, headers={"Accept": TABLE})
    with NO_PROXY.open(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (50 * 3600, "2d2h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_ages_print_like_kubectl(seconds, shown):
    assert tables.human_duration(seconds) == shown


def test_printer_columns_follow_simple_jsonpath():
    obj = {
        "status": {"conditions": [{"type": "Synced", "status": "True"}, {"type": "Ready", "status": "False"}]}
    }
    assert tables.jsonpath_values(obj, '.status.conditions[?(@.type=="Ready")].status') == ["False"]
    assert tables.jsonpath_values(obj, ".status.conditions[*].type") == ["Synced", "Ready"]
    assert tables.jsonpath_values(obj, ".status.conditions[1]['status']") == ["False"]
    assert tables.jsonpath_values(obj, ".spec.missing") == []


def test_a_table_is_built_from_the_crd_printer_columns(dev_cluster, custom, gizmos, test_namespace):
    spec = {"parallelism": {"tensor": 4}, "color": "red"}
    gizmo = {"apiVersion": f"{TEST_GROUP}/v1", "kind": "Gizmo", "metadata": {"name": "g"}, "spec": spec}
    custom.create_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "gizmos", gizmo)
    custom.patch_namespaced_custom_object_status(
        TEST_GROUP,
        "v1",
        test_namespace,
        "gizmos",
        "g",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        _content_type="application/merge-patch+json",
    )
    table = get_table(dev_cluster.url, f"/apis/{TEST_GROUP}/v1/namespaces/{test_namespace}/gizmos")
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    definitions = [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]
    assert definitions == [
        ("Name", "string", 0),
        ("Tensor", "integer", 0),
        ("Color", "string", 0),
        ("Ready", "string", 0),
        ("Zone", "string", 1),
        ("Age", "date", 0),
    ]
    [row] = table["rows"]
    assert row["cells"][:5] == ["g", 4, "red", "True", None]
    assert row["cells"][5].endswith("s")
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["namespace"] == test_namespace


def test_pods_print_ready_status_restarts_and_ip(dev_cluster, core, test_namespace):
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "engine"}]}}
    core.create_namespaced_pod(test_namespace, pod)
    wait_for(
        lambda: core.read_namespaced_pod("p", test_namespace).status.phase == "Running", what="pod running"
    )
    table = get_table(dev_cluster.url, f"/api/v1/namespaces/{test_namespace}/pods/p")
    columns = [column["name"] for column in table["columnDefinitions"]]
    cells = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert cells["Status"] == "Running" and cells["Restarts"] == 0 and cells["IP"].startswith("127.")


@requires_kubectl
def test_kubectl_applies_the_project_crd_and_lists_an_example(dev_cluster, tmp_path):
    crd = ROOT / "crds" / "inference.ascendfleet.io_ascendinferences.yaml"
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    if not crd.exists() or not examples:
        pytest.skip("the project CRD or examples are not there yet")
    assert "created" in kubectl(dev_cluster, "apply", "--validate=false", "-f", str(crd)).stdout
    example = yaml.safe_load(examples[0].read_text())
    kubectl(dev_cluster, "apply", "--validate=false", "-n", "default", "-f", str(examples[0]))
    listed = kubectl(dev_cluster, "get", "ascendinferences", "-n", "default").stdout
    assert listed.split()[0] == "NAME" and example["metadata"]["name"] in listed


@requires_kubectl
def test_kubectl_get_shows_the_printer_columns(dev_cluster, gizmos, test_namespace, tmp_path):
    manifest = tmp_path / "gizmo.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": f"{TEST_GROUP}/v1",
                "kind": "Gizmo",
                "metadata": {"name": "shiny"},
                "spec": {"parallelism": {"tensor": 8}, "color": "blue", "zone": "z1"},
            }
        )
    )
    applied = kubectl(dev_cluster, "apply", "--validate=false", "-n", test_namespace, "-f", str(manifest))
    assert "gizmo.test.ascendfleet.io/shiny created" in applied.stdout
    header, row = kubectl(dev_cluster, "get", "gizmos", "-n", test_namespace).stdout.splitlines()
    assert header.split() == ["NAME", "TENSOR", "COLOR", "READY", "AGE"]
    assert row.split()[:3] == ["shiny", "8", "blue"] and len(row.split()) == 4  # READY is empty
    wide = kubectl(dev_cluster, "get", "giz", "-n", test_namespace, "-o", "wide").stdout
    assert wide.splitlines()[0].split() == ["NAME", "TENSOR", "COLOR", "READY", "ZONE", "AGE"]
    manifest.write_text(manifest.read_text().replace("color: blue", "color: green"))
    reapplied = kubectl(dev_cluster, "apply", "--validate=false", "-n", test_namespace, "-f", str(manifest))
    assert "configured" in reapplied.stdout
    assert "green" in kubectl(dev_cluster, "get", "gizmo", "shiny", "-n", test_namespace).stdout
    kubectl(dev_cluster, "delete", "gizmo", "shiny", "-n", test_namespace)
    assert "No resources found" in kubectl(dev_cluster, "get", "gizmos", "-n", test_namespace).stderr


@requires_kubectl
def test_kubectl_scales_a_custom_resource(dev_cluster, custom, widgets, test_namespace):
    create_widget(custom, test_namespace, "w", spec={"size": {"replicas": 1}})
    kubectl(dev_cluster, "scale", "widget/w", "--replicas=4", "-n", test_namespace)
    widget = custom.get_namespaced_custom_object(TEST_GROUP, "v1", test_namespace, "widgets", "w")
    assert widget["spec"]["size"]["replicas"] == 4


@requires_kubectl
def test_kubectl_runs_and_lists_pods_and_nodes(dev_cluster, test_namespace):
    kubectl(dev_cluster, "run", "p", "--image=engine", "-n", test_namespace)
    wait_for(
        lambda: "Running" in kubectl(dev_cluster, "get", "pod", "p", "-n", test_namespace).stdout,
        what="kubectl to show the pod running",
    )
    nodes = kubectl(dev_cluster, "get", "nodes").stdout
    assert "sim-node-1" in nodes and "Ready" in nodes
    pod = json.loads(kubectl(dev_cluster, "get", "pod", "p", "-n", test_namespace, "-o", "json").stdout)
    assert pod["status"]["podIP"].startswith("127.")
    assert datetime.datetime.fromisoformat(pod["status"]["startTime"].replace("Z", "+00:00"))
