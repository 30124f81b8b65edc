"""The renderer: golden files per example, strict Kubernetes schema validation, engine flags."""

from __future__ import annotations

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.render import InvalidSpec, Owner, render_all, render_pdb, render_replica, revision, validate
from tests.support.paths import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
KUBERNETES_VERSION = "1.33"


def load_example(path):
    return validate(yaml.safe_load(path.read_text())).obj


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_render_matches_golden_file(example, update_golden):
    rendered = yaml.safe_dump_all(render_all(load_example(example)), sort_keys=False, width=120)
    golden = GOLDEN / f"{example.stem}.yaml"
    if update_golden:
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file for {example.name}; run pytest --update-golden"
    assert rendered == golden.read_text(), f"render of {example.name} changed; review, then pytest --update-golden"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_rendered_object_is_valid_kubernetes(example):
    for obj in render_all(load_example(example)):
        k8s_validate(obj, KUBERNETES_VERSION, strict=True)


def spec_doc(**spec):
    base = {"model": {"name": "m", "path": "/models/m"}, "engine": {"type": "vllm-ascend"}}
    return {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": {"name": "llm", "uid": "u-1"},
            "spec": {**base, **spec}}


def pods(**spec):
    return [o for o in render_all(validate(spec_doc(**spec)).obj) if o["kind"] == "Pod"]


def argv(pod):
    return pod["spec"]["containers"][0]["command"]


def flag(command, name):
    return command[command.index(name) + 1]


def test_vllm_single_pod_flags_come_from_the_spec():
    (pod,) = pods(parallelism={"tensor": 4, "pipeline": 2}, batching={"maxBatchSize": 32, "maxBatchTokens": 4096},
                  scheduling={"priority": True})
    command = argv(pod)
    assert command[:3] == ["vllm", "serve", "/models/m"]
    assert flag(command, "--tensor-parallel-size") == "4"
    assert flag(command, "--pipeline-parallel-size") == "2"
    assert flag(command, "--gpu-memory-utilization") == "0.85"  # static + dynamic, never the reserve
    assert flag(command, "--max-num-seqs") == "32"
    assert flag(command, "--max-num-batched-tokens") == "4096"
    assert flag(command, "--scheduling-policy") == "priority"
    assert flag(command, "--dtype") == "bfloat16"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"huawei.com/Ascend910": "8"}


def test_sglang_flags_and_launcher():
    (pod,) = pods(engine={"type": "sglang"}, parallelism={"tensor": 2}, precision="int8")
    command = argv(pod)
    assert command[:3] == ["python3", "-m", "ascend_fleet.exporter.sglang"]
    assert flag(command, "--tp-size") == "2"
    assert flag(command, "--mem-fraction-static") == "0.6"
    assert flag(command, "--quantization") == "modelslim"
    assert "--enable-metrics" in command and "--dtype" not in command
    (plain,) = pods(engine={"type": "sglang", "exporter": False})
    assert argv(plain)[:3] == ["python3", "-m", "sglang.launch_server"]


def test_multi_pod_vllm_replica_is_a_ray_gang():
    gang = pods(parallelism={"tensor": 8, "pipeline": 2, "data": 1})
    assert [p["metadata"]["name"] for p in gang] == ["llm-0", "llm-0-1"]
    leader, worker = gang
    assert leader["metadata"]["labels"][names.LABEL_ROLE] == "leader"
    assert worker["metadata"]["labels"][names.LABEL_ROLE] == "worker"
    assert worker["metadata"]["labels"][names.LABEL_RANK] == "1"
    assert "ray start --head" in argv(leader)[2] and "--distributed-executor-backend ray" in argv(leader)[2]
    assert argv(worker)[2] == "exec ray start --address=$(LEADER_ADDRESS):6379 --block"
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LEADER_ADDRESS"] == "llm-0.llm-pods.$(POD_NAMESPACE).svc"
    assert env["HCCL_IF_IP"] == "$(POD_IP)"
    assert env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert "readinessProbe" in leader["spec"]["containers"][0]
    assert "readinessProbe" not in worker["spec"]["containers"][0]
    assert worker["spec"]["subdomain"] == "llm-pods"


def test_multi_pod_sglang_ranks():
    gang = pods(engine={"type": "sglang"}, parallelism={"tensor": 8, "pipeline": 4})
    assert [flag(argv(p), "--node-rank") for p in gang] == ["0", "1", "2", "3"]
    assert {flag(argv(p), "--nnodes") for p in gang} == {"4"}
    assert {flag(argv(p), "--dist-init-addr") for p in gang} == {"$(LEADER_ADDRESS):5000"}


def test_user_args_are_appended_and_conflicts_rejected():
    (pod,) = pods(engine={"type": "vllm-ascend", "args": ["--enable-prefix-caching"]})
    assert argv(pod)[-1] == "--enable-prefix-caching"
    with pytest.raises(InvalidSpec, match="repeats the generated '--tensor-parallel-size 1'"):
        validate(spec_doc(engine={"type": "vllm-ascend", "args": ["--tensor-parallel-size", "2"]}))


def test_user_env_replaces_generated_env():
    (pod,) = pods(engine={"type": "vllm-ascend", "env": [{"name": "TASK_QUEUE_ENABLE", "value": "0"}]})
    env = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "TASK_QUEUE_ENABLE"]
    assert env == [{"name": "TASK_QUEUE_ENABLE", "value": "0"}]


def test_startup_probe_covers_model_loading():
    (pod,) = pods(engine={"type": "vllm-ascend", "startupTimeout": "45m"})
    probe = pod["spec"]["containers"][0]["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 45 * 60


def test_driver_mounts_without_the_ascend_runtime():
    (pod,) = pods(hardware={"ascendRuntime": False})
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert {"/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi", "/dev/shm"} <= mounts


def test_revision_tracks_the_pod_template_only():
    obj = validate(spec_doc(parallelism={"tensor": 2})).obj
    base = revision(obj.spec, "llm")
    more_replicas = obj.spec.model_copy(update={"parallelism": obj.spec.parallelism.model_copy(update={"data": 5})})
    assert revision(more_replicas, "llm") == base
    new_image = validate(spec_doc(parallelism={"tensor": 2}, engine={"type": "vllm-ascend", "image": "x:2"})).obj
    assert revision(new_image.spec, "llm") != base
    replica = render_replica(obj.spec, Owner("llm", "default", "u-1"), 3)
    assert replica[0]["metadata"]["labels"][names.LABEL_REVISION] == base
    assert replica[0]["metadata"]["labels"][names.LABEL_REPLICA] == "3"


def test_children_are_owned_and_services_select_the_right_pods():
    objs = render_all(AscendInference.model_validate(spec_doc(parallelism={"data": 2})))
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "u-1" for o in objs)
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    assert services["llm"]["spec"]["selector"] == {
        names.LABEL_NAME: "llm", names.LABEL_ROLE: "leader", names.LABEL_SERVING: "true"}
    assert services["llm-pods"]["spec"]["clusterIP"] == "None"
    (pdb,) = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {names.LABEL_NAME: "llm"}}}


@pytest.mark.parametrize(("data", "pipeline", "max_unavailable", "min_available"), [
    (2, 4, 1, 7),   # 2 replicas x 4 whole-node pods: one pod (so one replica) out at a time
    (2, 4, 2, 6),
    (3, 1, 1, 2),   # single-pod replicas: pods are replicas
    (1, 1, 3, 0),   # never negative
    (0, 1, 1, 0),
])
def test_pdb_counts_pods_not_replicas(data, pipeline, max_unavailable, min_available):
    doc = spec_doc(parallelism={"tensor": 8, "pipeline": pipeline, "data": data},
                   disruption={"maxUnavailable": max_unavailable})
    obj = AscendInference.model_validate(doc)
    pdb = render_pdb(obj.spec, Owner.of(obj))
    assert pdb["spec"]["minAvailable"] == min_available
    assert "maxUnavailable" not in pdb["spec"]  # measured against replicas by the API server, not pods


def test_offline_render_has_no_owner_references():
    doc = spec_doc()
    del doc["metadata"]["uid"]
    assert all("ownerReferences" not in o["metadata"] for o in render_all(validate(doc).obj))


@pytest.mark.parametrize(
    ("doc_change", "message"),
    [
        ({"metadata": {"name": "Bad_Name"}}, "must be a DNS label"),
        ({"metadata": {"name": "x" * 53}}, "at most 52 characters"),
        ({"kind": "Deployment"}, "kind is 'Deployment'"),
        ({"spec": {"model": {"name": "m", "path": "/m"}, "engine": {"type": "vllm-ascend"},
                   "parallelism": {"tensor": 3, "pipeline": 3}}}, "spec.parallelism: a replica of 9 NPUs"),
    ],
)
def test_validate_reports_every_problem(doc_change, message):
    with pytest.raises(InvalidSpec, match=message):
        validate({**spec_doc(), **doc_change})
