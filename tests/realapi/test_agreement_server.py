"""validate's sentences for what the API server refuses are the real kube-apiserver's own, and what it lets
through (a root uid under runAsNonRoot, two ports on one number) is what only validate catches before the kubelet
or the engine fails."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.layout import plan
from ascend_fleet.render import InvalidSpec, Owner, render_replica, validate

pytestmark = pytest.mark.e2e


def doc(template: dict | None = None, **engine) -> dict:
    spec = {"model": {"name": "m", "path": "/models/m"}, "engine": {"type": "vllm-ascend", **engine}}
    if template is not None:
        spec["template"] = template
    return {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": {"name": "llm"}, "spec": spec}


def unchecked_pod(body: dict, namespace: str) -> dict:
    """Replica 0's first pod as the renderer builds it, without validate's checks in front."""
    obj = AscendInference.model_validate(body)
    pods = [
        o for o in render_replica(obj.spec, Owner("llm", namespace), 0, plan(obj.spec)) if o["kind"] == "Pod"
    ]
    return pods[0]


@pytest.fixture(scope="module")
def namespace(real_cluster):
    name = real_cluster.create_namespace(f"agree-{uuid.uuid4().hex[:6]}")
    yield name
    real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def server_dry_run(real_cluster, namespace: str, pod: dict):
    return real_cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(pod), check=False
    )


def refusal(body: dict) -> str:
    with pytest.raises(InvalidSpec) as refused:
        validate(body)
    (problem,) = refused.value.problems
    return problem


def test_a_request_over_the_merged_limit_is_refused_with_the_servers_sentence(real_cluster, namespace):
    body = doc(resources={"requests": {"memory": "300Gi"}})
    quoted = re.search(r"the API server refuses the pod with '(.+?)'\)", refusal(body))
    assert quoted, refusal(body)
    created = server_dry_run(real_cluster, namespace, unchecked_pod(body, namespace))
    assert created.returncode != 0, "the API server accepted a request over the limit"
    assert quoted[1] in created.stderr, created.stderr


def test_what_the_server_lets_through_is_refused_by_validate(real_cluster, namespace):
    """The server admits both pods; the kubelet (runAsUser 0) or the engine (the port) then fails."""
    root = doc(template={"spec": {"securityContext": {"runAsUser": 0}}})
    assert (
        'spec.template.spec.securityContext.runAsUser: 0 is root, which Pod Security "restricted" refuses'
        in (refusal(root))
    )
    port = doc(port=9410, image="ghcr.io/ascend-fleet/vllm-ascend:0.1.0")
    assert "Address already in use" in refusal(port)
    for body in (root, port):
        created = server_dry_run(real_cluster, namespace, unchecked_pod(body, namespace))
        assert created.returncode == 0, created.stderr
