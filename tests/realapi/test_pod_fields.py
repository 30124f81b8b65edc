"""Spec fields copied into pods: what the operator refuses (InvalidSpec naming the field) the real API
server refuses in a pod too, and what it accepts the server accepts; the CRD applies with them all."""

from __future__ import annotations

import copy
import json
import uuid

import pytest

from ascend_fleet.render import InvalidSpec, render_all, validate
from tests.support.corpus import cr

pytestmark = pytest.mark.e2e


def engine(**fields):
    doc = cr()
    doc["spec"]["engine"].update(fields)
    return doc


VOLUME = {"persistentVolumeClaim": {"claimName": "models"}}
# (spec, where the operator's sentence points, the pod field the value lands in)
REFUSED = {
    "shmSize not a quantity": (engine(shmSize="16GB"), "spec.engine.shmSize"),
    "resource name without a domain": (engine(resources={"limits": {"gpu": "1"}}), "spec.engine.resources"),
    "resource quantity in words": (
        engine(resources={"requests": {"memory": "lots"}}),
        "spec.engine.resources",
    ),
    "request above limit": (
        engine(resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}),
        "spec.engine.resources",
    ),
    "env value and valueFrom": (
        engine(env=[{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        "spec.engine.env",
    ),
    "env fieldPath a container cannot read": (
        engine(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]),
        "spec.engine.env",
    ),
    "env name with =": (engine(env=[{"name": "A=B", "value": "x"}]), "spec.engine.env"),
    "toleration without key, Equal": (
        cr(scheduling={"tolerations": [{"operator": "Equal", "value": "x"}]}),
        "spec.scheduling.tolerations",
    ),
    "tolerationSeconds without NoExecute": (
        cr(
            scheduling={
                "tolerations": [
                    {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
                ]
            }
        ),
        "spec.scheduling.tolerations",
    ),
    "volume with two sources": (
        cr(model={"volume": {"hostPath": {"path": "/m"}, "nfs": {"server": "s", "path": "/m"}}}),
        "spec.model.volume",
    ),
    "volume claim without a name": (cr(model={"volume": {"persistentVolumeClaim": {}}}), "spec.model.volume"),
}
ACCEPTED = {
    "resources": engine(
        resources={"requests": {"cpu": "500m", "memory": "64Gi"}, "limits": {"memory": "64Gi"}}
    ),
    "env from the downward API": engine(
        env=[
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        ]
    ),
    "tolerations": cr(
        scheduling={
            "tolerations": [
                {"operator": "Exists"},
                {
                    "key": "huawei.com/Ascend910",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 30,
                },
            ]
        }
    ),
    "volume": cr(model={"volume": VOLUME}),
}


def _pod_with(field_doc: dict) -> dict:
    """A rendered pod of a valid spec, with the case's raw values put where the renderer puts them."""
    base = copy.deepcopy(field_doc)
    spec = base["spec"]
    raw_engine, raw_model, raw_scheduling = (
        dict(spec["engine"]),
        dict(spec["model"]),
        spec.get("scheduling", {}),
    )
    spec["engine"] = {"type": raw_engine["type"]}
    spec["model"] = {k: v for k, v in raw_model.items() if k != "volume"}
    spec.pop("scheduling", None)
    (pod,) = [o for o in render_all(validate(base).obj) if o["kind"] == "Pod"]
    container = pod["spec"]["containers"][0]
    if "shmSize" in raw_engine:
        pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = raw_engine["shmSize"]
    if "resources" in raw_engine:
        for part, table in raw_engine["resources"].items():
            container["resources"].setdefault(part, {}).update(table)
    if "env" in raw_engine:
        container["env"] += raw_engine["env"]
    if "tolerations" in raw_scheduling:
        pod["spec"]["tolerations"] = raw_scheduling["tolerations"]
    if "volume" in raw_model:
        pod["spec"]["volumes"].append({"name": "model", **raw_model["volume"]})
    return pod


@pytest.fixture(scope="module")
def namespace(real_cluster):
    name = f"pods-{uuid.uuid4().hex[:6]}"
    real_cluster.kubectl("create", "namespace", name)
    yield name
    real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def server_dry_run(real_cluster, namespace, obj):
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    return real_cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False
    )


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_refused_by_the_operator_and_by_the_server(real_cluster, namespace, case):
    doc, field = REFUSED[case]
    with pytest.raises(InvalidSpec) as refused:
        validate(doc)
    assert any(p.startswith(field) for p in refused.value.problems), refused.value.problems
    pod = server_dry_run(real_cluster, namespace, _pod_with(doc))
    assert pod.returncode != 0, f"the API server accepted a pod with {case}"


@pytest.mark.parametrize("case", ACCEPTED, ids=list(ACCEPTED))
def test_accepted_by_the_operator_the_crd_and_the_server(real_cluster, namespace, case):
    doc = ACCEPTED[case]
    pods = [o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"]
    result = server_dry_run(real_cluster, namespace, pods[0])
    assert result.returncode == 0, result.stderr
    applied = real_cluster.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        check=False,
        input=json.dumps({**doc, "metadata": {"name": "ok", "namespace": namespace}}),
    )
    assert applied.returncode == 0, applied.stderr
