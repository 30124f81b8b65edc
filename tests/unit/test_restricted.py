"""The restricted check on the operator's own pods: engine pods of every example and the picker's pod template
pass it untouched, and each rule refuses what it names."""

from __future__ import annotations

import copy

import pytest
import yaml

from ascend_fleet.render import render_all, validate
from ascend_fleet.render.restricted import restricted_problems
from tests.support.documents import RESTRICTED
from tests.support.paths import EXAMPLES


def operator_pods() -> list[tuple[str, dict, dict]]:
    """(label, pod spec, annotations) of every pod and pod template the examples render."""
    found = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "AscendInference":
                continue
            for obj in render_all(validate(doc).obj):
                if obj["kind"] == "Pod":
                    found.append((f"{path.name}/{obj['metadata']['name']}", obj["spec"], obj["metadata"]))
                elif obj["kind"] == "Deployment":
                    template = obj["spec"]["template"]
                    found.append(
                        (
                            f"{path.name}/Deployment/{obj['metadata']['name']}",
                            template["spec"],
                            template["metadata"],
                        )
                    )
    return found


def test_every_pod_the_operator_renders_is_restricted():
    pods = operator_pods()
    assert any("/Deployment/" in label for label, _, _ in pods), "no example renders the picker"
    for label, spec, meta in pods:
        assert restricted_problems(spec, meta.get("annotations")) == [], label


BASE = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "image": "x", "securityContext": copy.deepcopy(RESTRICTED)}],
}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda p: p["containers"][0]["securityContext"].update(privileged=True), "privileged"),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
            "SYS_ADMIN",
        ),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["NET_BIND_SERVICE"]),
            None,
        ),
        (lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}), "'Unconfined'"),
        (lambda p: p["securityContext"].update(seccompProfile={"type": "Localhost"}), None),
        (lambda p: p.update(volumes=[{"name": "g", "gitRepo": {"repository": "r"}}]), "gitRepo"),
        (lambda p: p.update(volumes=[{"name": "e", "emptyDir": {}}]), None),
        (lambda p: p.update(hostNetwork=True), "hostNetwork"),
        (lambda p: p["securityContext"].update(sysctls=[{"name": "net.ipv4.tcp_rmem", "value": "1"}]), None),
        (
            lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
            "kernel.msgmax",
        ),
        (
            lambda p: p["containers"][0]["securityContext"].update(seLinuxOptions={"type": "container_t"}),
            None,
        ),
        (lambda p: p["containers"][0]["securityContext"].update(seLinuxOptions={"user": "root"}), "SELinux"),
        (lambda p: p["containers"][0].update(ports=[{"containerPort": 1, "hostPort": 1}]), "hostPort 1"),
        (lambda p: p.update(initContainers=[{"name": "i", "image": "x"}]), "needs allowPrivilegeEscalation"),
        (lambda p: p["securityContext"].pop("runAsNonRoot"), "needs runAsNonRoot"),
        (lambda p: p["containers"][0]["securityContext"].update(runAsUser=0), "0 is root"),
    ],
)
def test_each_rule_refuses_what_it_names_and_admits_what_restricted_admits(change, words):
    pod = copy.deepcopy(BASE)
    change(pod)
    problems = restricted_problems(pod)
    if words is None:
        assert problems == []
    else:
        assert len(problems) == 1 and words in problems[0], problems
