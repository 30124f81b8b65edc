"""A two-role fleet (spec.disaggregation) run by the operator: prefill and decode pods created with their role
labels, status per role, Ready when both roles are, the Service on decode pods only, a failed prefill gang
recreated on its own."""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from ascend_fleet.observed import pod_ready
from tests.e2e.fleet import example, without_warnings

pytestmark = pytest.mark.e2e

NAME = "qwen-pd"


def roles_ready(fleet) -> dict | None:
    obj = fleet.get(NAME)
    status = obj.get("status") or {}
    roles = status.get("roles") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    done = (
        (roles.get("prefill") or {}).get("readyReplicas") == 1
        and (roles.get("decode") or {}).get("readyReplicas") == 2
        and ready.get("status") == "True"
        and status.get("observedGeneration") == obj["metadata"].get("generation")
    )
    return obj if done else None


def test_the_operator_runs_both_roles(fleet):
    fleet.apply(example("vllm-disaggregated.yaml"))
    obj = wait_for(lambda: roles_ready(fleet), 120, "one prefill and two decode replicas ready")
    status = obj["status"]
    assert (status["replicas"], status["readyReplicas"]) == (3, 3)
    assert status["roles"]["prefill"]["layout"]["npusPerPod"] == 4
    assert status["roles"]["decode"]["layout"]["npusPerPod"] == 2
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert without_warnings(ready["message"]) == "3 of 3 replicas ready (prefill 1 of 1, decode 2 of 2)"

    pods = {p["metadata"]["name"]: p for p in fleet.pods(NAME)}
    assert sorted(pods) == [f"{NAME}-decode-0", f"{NAME}-decode-1", f"{NAME}-prefill-0"]
    for name, pod in pods.items():
        labels = pod["metadata"]["labels"]
        role = "prefill" if "-prefill-" in name else "decode"
        assert labels[names.LABEL_PD_ROLE] == labels[names.LABEL_LLMD_ROLE] == role
        command = pod["spec"]["containers"][0]["command"]
        kv = command[command.index("--kv-transfer-config") + 1]
        assert ('"kv_producer"' if role == "prefill" else '"kv_consumer"') in kv
        assert pod["spec"]["hostname"] == name

    # The fleet's Service sends requests to the decode leaders only: its selector, as the API server answers
    # it, picks exactly those pods.
    service = fleet.kube.get("Service", fleet.namespace, NAME)
    selected = fleet.kube.list("Pod", fleet.namespace, service["spec"]["selector"])
    assert sorted(p["metadata"]["name"] for p in selected) == [f"{NAME}-decode-0", f"{NAME}-decode-1"]
    pdb = fleet.kube.get("PodDisruptionBudget", fleet.namespace, NAME)
    assert pdb["spec"]["minAvailable"] == 3 - 1


def test_a_failed_prefill_gang_is_recreated_alone(local_cluster, fleet):
    fleet.apply(example("vllm-disaggregated.yaml"))
    wait_for(lambda: roles_ready(fleet), 120, "both roles ready")
    decode_uids = {p["metadata"]["uid"] for p in fleet.pods(NAME) if "-decode-" in p["metadata"]["name"]}
    prefill = f"{NAME}-prefill-0"
    old_uid = fleet.kube.get("Pod", fleet.namespace, prefill)["metadata"]["uid"]
    local_cluster.kubelet.crash(fleet.namespace, prefill)

    def recreated() -> dict | None:
        pod = fleet.kube.get("Pod", fleet.namespace, prefill)
        fresh = pod and pod["metadata"]["uid"] != old_uid and pod_ready(pod)
        return pod if fresh and roles_ready(fleet) else None

    wait_for(recreated, 120, "the prefill gang recreated and both roles ready again")
    restarts = fleet.get(NAME)["status"]["groupRestarts"]
    assert [(r["role"], r["replica"]) for r in restarts] == [("prefill", 0)]
    # The decode pods were not touched.
    assert {
        p["metadata"]["uid"] for p in fleet.pods(NAME) if "-decode-" in p["metadata"]["name"]
    } == decode_uids
