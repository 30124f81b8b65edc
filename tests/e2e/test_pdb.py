"""The PodDisruptionBudget protects gangs on a real control plane: its disruption controller computes
`disruptionsAllowed` and the eviction API enforces it (the emulator runs neither)."""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import KubeError, wait_for
from tests.e2e.fleet import example

pytestmark = pytest.mark.e2e

NAME = "deepseek-70b"


@pytest.fixture
def real(cluster):
    if cluster is not None and hasattr(cluster, "emulator"):
        pytest.skip("needs the real disruption controller and eviction API")
    return cluster


def pdb_status(fleet) -> dict:
    return fleet.kube.get("PodDisruptionBudget", fleet.namespace, NAME).get("status") or {}


def evict(fleet, pod: str) -> None:
    fleet.kube.evict(fleet.namespace, pod)


def test_two_replicas_of_four_pods_allow_one_eviction(real, fleet):
    doc = example("vllm-multinode-tp8-pp4.yaml", scheduling={})
    doc["spec"]["parallelism"]["data"] = 2
    fleet.apply(doc)
    fleet.wait_ready(NAME, 2, timeout=120)
    pdb = fleet.kube.get("PodDisruptionBudget", fleet.namespace, NAME)
    assert pdb["spec"]["minAvailable"] == 7 and "maxUnavailable" not in pdb["spec"]
    status = wait_for(
        lambda: (
            (s := pdb_status(fleet)).get("currentHealthy") == 8
            and s.get("observedGeneration") == pdb["metadata"]["generation"]
            and s
        ),
        60,
        "the disruption controller to count 8 healthy pods",
    )
    assert (status["disruptionsAllowed"], status["desiredHealthy"], status["expectedPods"]) == (1, 7, 8)

    # The eviction API enforces it: one pod of replica 0 may go; then no pod of replica 1.
    evict(fleet, f"{NAME}-0-1")
    with pytest.raises(KubeError) as refused:
        evict(fleet, f"{NAME}-1-1")
    assert refused.value.status == 429, refused.value
    assert "disruption budget" in str(refused.value)
    assert not fleet.kube.get("Pod", fleet.namespace, f"{NAME}-1-1")["metadata"].get("deletionTimestamp")


def test_the_budget_follows_a_scale(real, fleet):
    doc = example("vllm-multinode-tp8-pp4.yaml", scheduling={})
    fleet.apply(doc)
    fleet.wait_ready(NAME, 1, timeout=120)
    wait_for(lambda: pdb_status(fleet).get("disruptionsAllowed") == 1, 60, "one disruption allowed of 4 pods")
    assert fleet.kube.get("PodDisruptionBudget", fleet.namespace, NAME)["spec"]["minAvailable"] == 3
    fleet.scale(NAME, 2)
    wait_for(
        lambda: fleet.kube.get("PodDisruptionBudget", fleet.namespace, NAME)["spec"]["minAvailable"] == 7,
        30,
        "minAvailable 7 after the scale to 2 replicas",
    )
    fleet.wait_ready(NAME, 2, timeout=120)
    wait_for(
        lambda: (
            pdb_status(fleet).get("disruptionsAllowed") == 1 and pdb_status(fleet).get("currentHealthy") == 8
        ),
        60,
        "still one disruption allowed of 8 pods",
    )
    assert (
        names.LABEL_NAME
        in fleet.kube.get("PodDisruptionBudget", fleet.namespace, NAME)["spec"]["selector"]["matchLabels"]
    )
