"""Volcano gang scheduling on the real control plane: one PodGroup per replica, created before its pods,
deleted with them on scale-in, and collected by the real garbage collector with the AscendInference.

Volcano itself does not run here: its PodGroup CustomResourceDefinition is applied (with an open schema), so
the API server stores the groups the operator writes; the pods stay unscheduled (schedulerName: volcano).
"""

from __future__ import annotations

import contextlib

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import NotFound, wait_for
from tests.e2e.conftest import OperatorHandle, fast_settings
from tests.e2e.fleet import Fleet, example

pytestmark = pytest.mark.e2e

POD_GROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.volcano.sh"},
    "spec": {
        "group": "scheduling.volcano.sh",
        "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "shortNames": ["pg"]},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


@pytest.fixture
def volcano_crd(cluster, real_cluster):
    if cluster is not real_cluster:  # the test's namespace must be on the real control plane too
        pytest.skip("needs the real control plane as the e2e backend (the real garbage collector)")
    # Kept if an earlier test made it; waits until the resource lists. (``kubectl wait`` for Established
    # fails at once, rather than waits, while a just-created CRD's status has no conditions yet.)
    real_cluster.cluster.install_crd(POD_GROUP_CRD)


def pod_groups(kube, namespace: str) -> dict[str, dict]:
    return {g["metadata"]["name"]: g for g in kube.list("PodGroup", namespace)}


def test_volcano_gangs_get_pod_groups_that_come_and_go_with_them(real_cluster, volcano_crd, namespace):
    admin = real_cluster.kube
    # The admin client: the chart grants podgroups only with volcano.enabled.
    operator = OperatorHandle(admin, fast_settings())
    try:
        fleet = Fleet(admin, namespace)
        doc = example("vllm-volcano-gang.yaml", disruption={"maxUnavailable": 1, "drainSeconds": 0})
        created = fleet.apply(doc)
        uid = created["metadata"]["uid"]

        def both_groups():
            found = pod_groups(admin, namespace)
            return found if len(found) == 2 else None

        def all_pods():
            found = fleet.pods("qwen-72b")
            return found if len(found) == 4 else None

        groups = wait_for(both_groups, 30, "a PodGroup per replica")
        assert sorted(groups) == ["qwen-72b-0", "qwen-72b-1"]
        for group in groups.values():
            # Every pod's requests (two pods of 8 NPUs, 32 CPUs, 272Gi), in the queue the object's annotation names.
            assert group["spec"] == {
                "minMember": 2,
                "minResources": {"cpu": "64", "huawei.com/Ascend910": "16", "memory": "544Gi"},
                "queue": "inference",
            }
            (ref,) = group["metadata"]["ownerReferences"]
            assert (ref["uid"], ref["controller"]) == (uid, True)
        pods = wait_for(all_pods, 30, "the gangs' pods")
        assert {p["metadata"]["annotations"][names.ANNOTATION_POD_GROUP] for p in pods} == set(groups)
        assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}

        fleet.scale("qwen-72b", 1)
        wait_for(
            lambda: sorted(pod_groups(admin, namespace)) == ["qwen-72b-0"],
            30,
            "the scaled-in replica's PodGroup deleted with its pods",
        )

        admin.delete(names.KIND, namespace, "qwen-72b")
        wait_for(
            lambda: not pod_groups(admin, namespace), 60, "the garbage collector removing the last PodGroup"
        )
    finally:
        operator.stop()
        with contextlib.suppress(NotFound):
            admin.delete(names.KIND, namespace, "qwen-72b")
