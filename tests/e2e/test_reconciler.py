"""The operator end to end: create, scale, roll out, gang restart, invalid specs, restarts, API faults."""

from __future__ import annotations

import threading
import time

import kmock
import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from ascend_fleet.observed import pod_ready
from tests.e2e.fleet import example

pytestmark = pytest.mark.e2e


def leaders_serving(pods: list[dict]) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in pods
        if p["metadata"]["labels"].get(names.LABEL_ROLE) == "leader"
        and p["metadata"]["labels"].get(names.LABEL_SERVING) == "true"
        and pod_ready(p)
        and not p["metadata"].get("deletionTimestamp")
    }


def test_create_single_pod_replicas_with_owned_children(fleet):
    obj = fleet.apply(example("vllm-tp4-pp2-dp2.yaml"))
    ready = fleet.wait_ready("qwen-7b", 2)
    assert fleet.pod_names("qwen-7b") == ["qwen-7b-0", "qwen-7b-1"]
    status = ready["status"]
    assert status["layout"] == {"npusPerReplica": 8, "podsPerReplica": 1, "npusPerPod": 8, "totalNpus": 16}
    assert status["selector"] == f"{names.LABEL_NAME}=qwen-7b,{names.LABEL_ROLE}=leader"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True" and conditions["Progressing"]["reason"] == "Converged"
    uid = obj["metadata"]["uid"]
    children = fleet.pods("qwen-7b")
    children += [fleet.kube.get("Service", fleet.namespace, n) for n in ("qwen-7b", "qwen-7b-pods")]
    children.append(fleet.kube.get("PodDisruptionBudget", fleet.namespace, "qwen-7b"))
    for child in children:
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["uid"], ref["controller"], ref["kind"]) == (uid, True, names.KIND)
    pod = fleet.pods("qwen-7b")[0]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "huawei.com/Ascend910": "8",
        "memory": "272Gi",
    }
    # One Event for the first pass's creates, counted once: no duplicate creates to report.
    (created,) = fleet.events("CreatedReplica")
    assert created["message"].startswith("created replicas 0, 1 (1 pod each, revision ")
    assert created["message"].endswith(
        "; Service qwen-7b, Service qwen-7b-pods, PodDisruptionBudget qwen-7b, NetworkPolicy qwen-7b"
    ), created["message"]
    assert created.get("count", 1) == 1


@pytest.mark.parametrize(
    ("file", "name", "ranks"),
    [("vllm-multinode-tp8-pp4.yaml", "deepseek-70b", 4), ("sglang-a3-multinode.yaml", "qwen3-235b", 2)],
)
def test_multi_pod_replicas_for_both_engines(fleet, file, name, ranks):
    # The default scheduler places them: no Volcano runs here (the A3 example asks for it) and the simulated
    # nodes carry no accelerator-type labels.
    fleet.apply(example(file, scheduling={}))
    fleet.wait_ready(name, 1)
    pods = fleet.pods(name)
    assert [p["metadata"]["labels"][names.LABEL_RANK] for p in pods] == [str(r) for r in range(ranks)]
    assert [p["metadata"]["labels"][names.LABEL_ROLE] for p in pods] == ["leader"] + ["worker"] * (ranks - 1)


def test_scale_up_and_down_through_the_scale_subresource(fleet):
    fleet.apply(example("sglang-small.yaml", disruption={"maxUnavailable": 1, "drainSeconds": 2}))
    fleet.wait_ready("qwen-1-5b", 1)
    fleet.scale("qwen-1-5b", 3)
    fleet.wait_ready("qwen-1-5b", 3)
    scale = fleet.kube.get(names.KIND, fleet.namespace, "qwen-1-5b", "scale")
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (3, 3)

    seen: dict[str, float] = {}
    fleet.scale("qwen-1-5b", 1)

    def drained_then_gone():
        pods = {p["metadata"]["name"]: p for p in fleet.pods("qwen-1-5b")}
        for name in ("qwen-1-5b-1", "qwen-1-5b-2"):
            pod = pods.get(name)
            if pod and pod["metadata"]["labels"].get(names.LABEL_SERVING) == "false":
                seen.setdefault(f"{name}:drain", time.monotonic())
            if pod is None:
                seen.setdefault(f"{name}:gone", time.monotonic())
        return len([k for k in seen if k.endswith(":gone")]) == 2

    wait_for(drained_then_gone, 20, "both extra replicas drained and deleted")
    for name in ("qwen-1-5b-1", "qwen-1-5b-2"):
        assert f"{name}:drain" in seen, f"{name} was deleted without a drain"
        assert seen[f"{name}:gone"] - seen[f"{name}:drain"] >= 1.5  # drainSeconds: 2
    fleet.wait_ready("qwen-1-5b", 1)
    assert fleet.pod_names("qwen-1-5b") == ["qwen-1-5b-0"]


def test_rolling_update_never_exceeds_max_unavailable(fleet):
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 2, "data": 3},
            disruption={"maxUnavailable": 1, "drainSeconds": 1},
        )
    )
    before = fleet.wait_ready("qwen-1-5b", 3)["status"]["revision"]
    worst = [0]
    stop = threading.Event()

    def watch_availability():
        while not stop.is_set():
            worst[0] = max(worst[0], 3 - len(leaders_serving(fleet.pods("qwen-1-5b"))))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch_availability)
    watcher.start()
    try:
        fleet.patch_spec("qwen-1-5b", {"engine": {"type": "sglang", "image": "registry.local/sglang:v2"}})
        done = fleet.wait_ready("qwen-1-5b", 3, timeout=40)
    finally:
        stop.set()
        watcher.join()
    assert done["status"]["revision"] != before
    assert {p["spec"]["containers"][0]["image"] for p in fleet.pods("qwen-1-5b")} == {
        "registry.local/sglang:v2"
    }
    assert worst[0] == 1, f"at worst {worst[0]} replicas were out of service"
    assert len(fleet.events("RolloutStep")) == 3


def test_a_crashed_rank_restarts_its_whole_gang_with_backoff(fleet, local_cluster):
    fleet.apply(example("vllm-multinode-tp8-pp4.yaml", parallelism={"tensor": 8, "pipeline": 2, "data": 2}))
    fleet.wait_ready("deepseek-70b", 2)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in fleet.pods("deepseek-70b")}

    local_cluster.kubelet.crash(fleet.namespace, "deepseek-70b-1-1")

    def gang_replaced():
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in fleet.pods("deepseek-70b")}
        return (
            len(now) == 4
            and now["deepseek-70b-1"] != uids["deepseek-70b-1"]
            and now["deepseek-70b-1-1"] != uids["deepseek-70b-1-1"]
            and now
        )

    replaced = wait_for(gang_replaced, 20, "replica 1's gang recreated")
    assert replaced["deepseek-70b-0"] == uids["deepseek-70b-0"]  # the other replica is untouched
    assert replaced["deepseek-70b-0-1"] == uids["deepseek-70b-0-1"]
    fleet.wait_ready("deepseek-70b", 2)

    # A crash loop: the second failure waits backoffInitial (2 s) before the gang comes back.
    local_cluster.kubelet.crash(fleet.namespace, "deepseek-70b-1")
    wait_for(lambda: "deepseek-70b-1" not in fleet.pod_names("deepseek-70b"), 10, "the gang deleted")
    deleted_at = time.monotonic()
    degraded = wait_for(
        lambda: (
            fleet.condition("deepseek-70b", "Degraded").get("status") == "True"
            and fleet.condition("deepseek-70b", "Degraded")
        ),
        5,
        "Degraded=True",
    )
    assert "keep failing" in degraded["message"]
    wait_for(lambda: "deepseek-70b-1" in fleet.pod_names("deepseek-70b"), 10, "the gang recreated")
    assert time.monotonic() - deleted_at >= 1.8
    restarts = fleet.get("deepseek-70b")["status"]["groupRestarts"]
    assert restarts == [{"replica": 1, "count": 2, "lastTime": restarts[0]["lastTime"]}]
    assert len(fleet.events("ReplicaRestart")) == 2


def test_invalid_spec_gets_a_condition_and_no_children(fleet):
    # A mistake the schema cannot see (the layout's are refused at apply time): an argument that repeats a
    # generated flag.
    bad = example("sglang-small.yaml", engine={"type": "sglang", "args": ["--tp-size", "4"]})
    fleet.apply(bad)
    ready = wait_for(
        lambda: (
            fleet.condition("qwen-1-5b", "Ready").get("reason") == "InvalidSpec"
            and fleet.condition("qwen-1-5b", "Ready")
        ),
        10,
        "InvalidSpec",
    )
    assert ready["status"] == "False"
    assert "'--tp-size' repeats the generated '--tp-size 2'" in ready["message"]
    time.sleep(1)
    assert fleet.pods("qwen-1-5b") == []
    assert fleet.kube.list("Service", fleet.namespace) == []
    assert len(fleet.events("InvalidSpec")) == 1
    # Fixing the spec heals it.
    fleet.patch_spec("qwen-1-5b", {"engine": {"args": []}})
    fleet.wait_ready("qwen-1-5b", 1)


def test_pods_of_other_owners_are_never_touched(fleet):
    squatter = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "qwen-1-5b-0",
            "namespace": fleet.namespace,
            "labels": {names.LABEL_NAME: "qwen-1-5b", names.LABEL_REPLICA: "0", names.LABEL_RANK: "0"},
        },
        "spec": {"containers": [{"name": "c", "image": "someone/else"}]},
    }
    fleet.kube.create(squatter)
    fleet.apply(example("sglang-small.yaml"))
    wait_for(lambda: fleet.get("qwen-1-5b").get("status", {}).get("conditions"), 10, "a status")
    time.sleep(1.5)
    (pod,) = fleet.pods("qwen-1-5b")
    assert pod["spec"]["containers"][0]["image"] == "someone/else"
    assert not pod["metadata"].get("ownerReferences")


def test_operator_restarted_mid_rollout_converges_without_duplicates(fleet, operator):
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 2, "data": 3},
            disruption={"maxUnavailable": 1, "drainSeconds": 2},
        )
    )
    fleet.wait_ready("qwen-1-5b", 3)
    fleet.patch_spec("qwen-1-5b", {"engine": {"type": "sglang", "image": "registry.local/sglang:v3"}})
    wait_for(
        lambda: any(
            p["metadata"]["labels"].get(names.LABEL_SERVING) == "false" for p in fleet.pods("qwen-1-5b")
        ),
        10,
        "a replica draining",
    )
    operator.restart()
    fleet.wait_ready("qwen-1-5b", 3, timeout=40)
    pods = fleet.pods("qwen-1-5b")
    assert [p["metadata"]["name"] for p in pods] == ["qwen-1-5b-0", "qwen-1-5b-1", "qwen-1-5b-2"]
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {"registry.local/sglang:v3"}


@pytest.mark.emulator
def test_converges_through_api_faults(fleet, emulator):
    emulator[kmock.method.POST, kmock.resource("v1/pods")][:2] << 500
    emulator[kmock.method.POST, kmock.resource("v1/services")][:1] << 429
    emulator[kmock.method.PATCH, kmock.resource("v1/pods")][:1] << 409
    # The operator's status writes (it writes nothing else to the object: no finalizer).
    (
        emulator[
            kmock.method.PATCH,
            kmock.resource(f"{names.API_VERSION}/{names.PLURAL}"),
            kmock.subresource("status"),
        ][:2]
        << 500
    )
    fleet.apply(
        example(
            "sglang-small.yaml",
            parallelism={"tensor": 2, "data": 2},
            disruption={"maxUnavailable": 1, "drainSeconds": 0},
        )
    )
    fleet.wait_ready("qwen-1-5b", 2, timeout=40)
    fleet.scale("qwen-1-5b", 1)
    fleet.wait_ready("qwen-1-5b", 1, timeout=30)
    assert fleet.pod_names("qwen-1-5b") == ["qwen-1-5b-0"]


def test_deleting_the_object_deletes_its_children(fleet):
    fleet.apply(example("sglang-small.yaml"))
    fleet.wait_ready("qwen-1-5b", 1)
    fleet.kube.delete(names.KIND, fleet.namespace, "qwen-1-5b")
    wait_for(
        lambda: not fleet.pods("qwen-1-5b") and not fleet.kube.list("Service", fleet.namespace),
        15,
        "children garbage-collected",
    )


def test_drifted_children_are_patched_back(fleet):
    fleet.apply(example("sglang-small.yaml"))
    fleet.wait_ready("qwen-1-5b", 1)
    fleet.kube.patch("Service", fleet.namespace, "qwen-1-5b", {"spec": {"selector": {"app": "hijacked"}}})
    wait_for(
        lambda: (
            fleet.kube.get("Service", fleet.namespace, "qwen-1-5b")["spec"]["selector"].get(
                names.LABEL_SERVING
            )
            == "true"
        ),
        10,
        "the serving selector restored",
    )
    fleet.kube.patch("PodDisruptionBudget", fleet.namespace, "qwen-1-5b", {"spec": {"minAvailable": 5}})
    wait_for(
        lambda: (
            fleet.kube.get("PodDisruptionBudget", fleet.namespace, "qwen-1-5b")["spec"]["minAvailable"] == 0
        ),
        10,
        "the PDB restored (1 pod - maxUnavailable 1)",
    )
    assert fleet.pod_names("qwen-1-5b") == ["qwen-1-5b-0"]  # neither change restarts an engine


def test_operator_metrics_count_reconciles_and_replicas(fleet):
    from prometheus_client import REGISTRY, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    fleet.apply(example("sglang-small.yaml", parallelism={"tensor": 2, "data": 2}))
    fleet.wait_ready("qwen-1-5b", 2)

    def samples():
        families = text_string_to_metric_families(generate_latest(REGISTRY).decode())
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}

    def replicas(state):
        return samples().get(
            (
                "ascend_fleet_operator_replicas",
                (("inference", "qwen-1-5b"), ("namespace", fleet.namespace), ("state", state)),
            )
        )

    wait_for(lambda: replicas("ready") == 2, 10, "the ready gauge")
    assert replicas("desired") == 2 and replicas("draining") == 0
    current = samples()
    assert current[("ascend_fleet_operator_reconciles_total", (("result", "changed"),))] >= 1
    assert current[("ascend_fleet_operator_reconciles_total", (("result", "converged"),))] >= 1


@pytest.mark.emulator
def test_converges_after_the_pod_watch_expires(fleet, local_cluster, emulator):
    fleet.apply(example("sglang-small.yaml"))
    fleet.wait_ready("qwen-1-5b", 1)
    # The next pod watch (kopf resumes them every watchTimeout, 3 s here) answers 410 Gone, as an API server
    # does once the resourceVersion it resumes from has been compacted away.
    pod_watches = emulator[kmock.method.GET, kmock.resource("v1/pods"), kmock.params(watch="true")]
    before = len(pod_watches)
    pod_watches[:1] << 410
    wait_for(lambda: len(pod_watches) > before, 10, "the watch resumed (and answered 410)")
    local_cluster.kubelet.crash(fleet.namespace, "qwen-1-5b-0")
    fleet.scale("qwen-1-5b", 2)
    fleet.wait_ready("qwen-1-5b", 2, timeout=40)
    status = fleet.get("qwen-1-5b")["status"]
    assert [r["count"] for r in status["groupRestarts"]] == [1], (
        status,
        [e["message"] for e in fleet.events()],
    )
