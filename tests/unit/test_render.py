"""The renderer: golden files per example, strict Kubernetes schema validation, engine flags."""

from __future__ import annotations

import re

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.cli.output import yaml_stream
from ascend_fleet.render import InvalidSpec, Owner, render_all, render_pdb, render_replica, revision, validate
from tests.support.documents import RESTRICTED, inference
from tests.support.paths import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
KUBERNETES_VERSION = "1.33"


def load_example(path):
    return validate(yaml.safe_load(path.read_text())).obj


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_render_matches_golden_file(example, update_golden):
    rendered = yaml_stream(render_all(load_example(example)))
    assert "&id0" not in rendered and "*id0" not in rendered, "YAML anchors make GitOps diffs unreadable"
    golden = GOLDEN / f"{example.stem}.yaml"
    if update_golden:
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file for {example.name}; run pytest --update-golden"
    assert rendered == golden.read_text(), (
        f"render of {example.name} changed; review, then pytest --update-golden"
    )


# Kinds from CRDs, not built-in schemas: Volcano's PodGroup; the routing kinds, checked against the pinned
# upstream CRDs in test_routing.py.
CUSTOM_KINDS = {"PodGroup", "InferencePool", "InferenceObjective", "InferenceModelRewrite", "HTTPRoute"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_rendered_object_is_valid_kubernetes(example):
    for obj in render_all(load_example(example)):
        if obj["kind"] not in CUSTOM_KINDS:
            k8s_validate(obj, KUBERNETES_VERSION, strict=True)


def spec_doc(**spec):
    return inference("llm").uid("u-1").engine("vllm-ascend").spec(**spec).build()


def pods(**spec):
    return [o for o in render_all(validate(spec_doc(**spec)).obj) if o["kind"] == "Pod"]


def argv(pod):
    return pod["spec"]["containers"][0]["command"]


def flag(command, name):
    return command[command.index(name) + 1]


def test_vllm_single_pod_flags_come_from_the_spec():
    (pod,) = pods(
        parallelism={"tensor": 4, "pipeline": 2},
        batching={"maxBatchSize": 32, "maxBatchTokens": 4096},
        scheduling={"priority": True},
    )
    command = argv(pod)
    assert command[:3] == ["vllm", "serve", "/models/m"]
    assert flag(command, "--tensor-parallel-size") == "4"
    assert flag(command, "--pipeline-parallel-size") == "2"
    assert flag(command, "--gpu-memory-utilization") == "0.85"  # static + dynamic, never the reserve
    assert flag(command, "--max-num-seqs") == "32"
    assert flag(command, "--max-num-batched-tokens") == "4096"
    assert flag(command, "--scheduling-policy") == "priority"
    assert flag(command, "--dtype") == "bfloat16"
    resources = pod["spec"]["containers"][0]["resources"]
    # Host CPU and memory by default from the NPUs (4 CPUs, 32 GiB a NPU, plus the 16 GiB /dev/shm).
    assert resources["requests"] == {"cpu": "32", "memory": "272Gi", "huawei.com/Ascend910": "8"}
    assert resources["limits"] == {"memory": "272Gi", "huawei.com/Ascend910": "8"}


def test_engine_resources_override_the_defaults_key_by_key():
    (pod,) = pods(
        engine={"type": "vllm-ascend", "resources": {"requests": {"cpu": "10"}, "limits": {"cpu": "12"}}}
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "10" and resources["requests"]["memory"] == "48Gi"
    assert resources["limits"] == {"memory": "48Gi", "cpu": "12", "huawei.com/Ascend910": "1"}


def test_pods_run_restricted_without_a_service_account_token():
    (pod,) = pods()
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = spec["containers"][0]["securityContext"]
    assert container == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


PROJECT_SGLANG = "ghcr.io/ascend-fleet/sglang:0.1.0"


def test_sglang_flags_and_launcher():
    (pod,) = pods(
        engine={"type": "sglang", "image": PROJECT_SGLANG},
        parallelism={"tensor": 2},
        precision="int8",
        batching={"maxBatchTokens": 8192},
    )
    command = argv(pod)
    # SGLang 0.5.14 loads the exporter through its sglang.srt.plugins entry point: its own launcher.
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["ASCEND_FLEET_EXPORTER"] == "1"
    assert flag(command, "--tp-size") == "2"
    assert flag(command, "--mem-fraction-static") == "0.6"
    assert flag(command, "--quantization") == "modelslim"
    assert flag(command, "--chunked-prefill-size") == "8192" and "--max-prefill-tokens" not in command
    assert "--enable-metrics" in command and "--dtype" not in command
    (plain,) = pods(engine={"type": "sglang", "image": PROJECT_SGLANG, "exporter": False})
    assert argv(plain)[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "ASCEND_FLEET_EXPORTER" not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    # An SGLang without the plugin group starts through the project's wrapper, which arms the exporter.
    (older,) = pods(engine={"type": "sglang", "image": "registry.example.com/sglang:v0.5.10-cann8.5.0-910b"})
    assert argv(older)[:3] == ["python3", "-m", "ascend_fleet_exporter.sglang"]


def test_the_upstream_sglang_image_never_gets_the_exporter_launcher():
    doc = spec_doc(engine={"type": "sglang"})
    valid = validate(doc)
    (pod,) = [o for o in render_all(valid.obj) if o["kind"] == "Pod"]
    assert pod["spec"]["containers"][0]["image"].startswith("lmsysorg/sglang:")
    assert argv(pod)[:3] == ["python3", "-m", "sglang.launch_server"]
    assert all(p["name"] != "npu-metrics" for p in pod["spec"]["containers"][0]["ports"])
    assert any("without this project's exporter" in w for w in valid.warnings)


def test_sglang_priority_runs_on_fcfs_with_lower_values_first():
    (pod,) = pods(engine={"type": "sglang"}, scheduling={"priority": True})
    command = argv(pod)
    assert "--enable-priority-scheduling" in command and "--schedule-low-priority-values-first" in command
    assert flag(command, "--schedule-policy") == "fcfs"


def test_int8_on_sglang_before_0_5_7_is_refused():
    with pytest.raises(InvalidSpec, match="SGLang 0.5.5 .*lacks; use an image with SGLang 0.5.7"):
        validate(
            spec_doc(
                engine={"type": "sglang", "image": "lmsysorg/sglang:v0.5.5-cann8.3.rc1-910b"},
                precision="int8",
            )
        )
    validate(spec_doc(engine={"type": "sglang"}, hardware={"chip": "ascend910_93"}, precision="int8"))


def test_vllm_ascend_on_910a_is_refused_with_a_sentence():
    from ascend_fleet.api import images

    assert images.default_image("vllm-ascend", "ascend910a") is None
    with pytest.raises(InvalidSpec, match="does not run on hardware.chip ascend910a.*use engine.type sglang"):
        validate(spec_doc(hardware={"chip": "ascend910a"}))


@pytest.mark.parametrize("segments", [True, False])
def test_expandable_segments_are_set_explicitly_both_ways(segments):
    (pod,) = pods(memory={"expandableSegments": segments})
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PYTORCH_NPU_ALLOC_CONF"] == f"expandable_segments:{segments}"


def test_hostpath_model_volumes_only_when_the_operator_allows_them():
    doc = spec_doc(model={"name": "m", "path": "/models/m", "volume": {"hostPath": {"path": "/data"}}})
    with pytest.raises(InvalidSpec, match="hostPath volumes are off"):
        validate(doc)
    validate(doc, allow_host_path=True)


def test_multi_pod_vllm_replica_is_a_ray_gang():
    gang = pods(
        parallelism={"tensor": 8, "pipeline": 2, "data": 1},
        engine={"type": "vllm-ascend", "multiNode": "ray"},
    )
    assert [p["metadata"]["name"] for p in gang] == ["llm-0", "llm-0-1"]
    leader, worker = gang
    assert leader["metadata"]["labels"][names.LABEL_ROLE] == "leader"
    assert worker["metadata"]["labels"][names.LABEL_ROLE] == "worker"
    assert worker["metadata"]["labels"][names.LABEL_RANK] == "1"
    assert argv(leader)[2] == 'ray start --head --port=6379 && exec "$@"'
    assert argv(leader)[4:6] == ["vllm", "serve"] and "--distributed-executor-backend" in argv(leader)
    assert argv(worker)[2] == 'exec ray start --address="${LEADER_ADDRESS}:6379" --block'
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LEADER_ADDRESS"] == "llm-0.llm-pods.$(POD_NAMESPACE).svc"
    assert env["HCCL_IF_IP"] == "$(POD_IP)"
    assert env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert "readinessProbe" in leader["spec"]["containers"][0]
    assert "readinessProbe" not in worker["spec"]["containers"][0]
    assert worker["spec"]["subdomain"] == "llm-pods"


def test_multi_pod_vllm_defaults_to_the_native_launch_on_vllm_0_23():
    leader, worker = pods(parallelism={"tensor": 8, "pipeline": 2})
    for rank, pod in enumerate((leader, worker)):
        command = argv(pod)
        assert command[:3] == ["vllm", "serve", "/models/m"]
        assert flag(command, "--nnodes") == "2" and flag(command, "--node-rank") == str(rank)
        assert (
            flag(command, "--master-addr") == "$(LEADER_ADDRESS)"
            and flag(command, "--master-port") == "29500"
        )
        assert "--distributed-executor-backend" not in command
    assert "--headless" not in argv(leader) and "--headless" in argv(worker)
    # An image with vLLM 0.11 has no native launch: Ray by default, native refused.
    old = {"type": "vllm-ascend", "image": "quay.io/ascend/vllm-ascend:v0.11.0"}
    assert argv(pods(parallelism={"tensor": 8, "pipeline": 2}, engine=old)[0])[0] == "/bin/bash"
    with pytest.raises(InvalidSpec, match="multiNode: native needs vLLM 0.23.0"):
        validate(spec_doc(parallelism={"tensor": 8, "pipeline": 2}, engine={**old, "multiNode": "native"}))


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


@pytest.mark.parametrize(
    ("engine", "arg", "generated"),
    [
        ("vllm-ascend", "-tp", "--tensor-parallel-size"),
        ("vllm-ascend", "--tensor_parallel_size", "--tensor-parallel-size"),
        ("vllm-ascend", "--tensor-parallel-size=2", "--tensor-parallel-size"),
        ("vllm-ascend", "--max_model_len=4096", "--max-model-len"),
        ("vllm-ascend", "--tensor-par", "--tensor-parallel-size"),  # argparse takes unambiguous prefixes
        ("vllm-ascend", "-pp", "--pipeline-parallel-size"),
        ("sglang", "--tp", "--tp-size"),
        ("sglang", "--tensor-parallel-size", "--tp-size"),
        ("sglang", "--pp-size=2", "--pp-size"),
        ("sglang", "--model", "--model-path"),
    ],
)
def test_conflicts_know_each_engines_spellings(engine, arg, generated):
    doc = spec_doc(
        engine={"type": engine, "args": [arg, "2"]},
        model={"name": "m", "path": "/models/m", "maxModelLen": 8192},
    )
    with pytest.raises(InvalidSpec, match=f"{arg!r} repeats the generated '{generated}"):
        validate(doc)


@pytest.mark.parametrize(
    ("engine", "arg", "planned"),
    [
        ("vllm-ascend", "--data-parallel-size", "--data-parallel-size"),
        ("vllm-ascend", "-dp", "--data-parallel-size"),
        ("vllm-ascend", "--data_parallel_address", "--data-parallel-address"),
        ("vllm-ascend", "--data-parallel-size-l", "--data-parallel-size-local"),  # an unambiguous prefix
        ("vllm-ascend", "-pcp", "--prefill-context-parallel-size"),
        ("vllm-ascend", "--headless", "--headless"),  # generated only for a gang's workers
        ("vllm-ascend", "--master-addr=10.0.0.1", "--master-addr"),
        ("sglang", "--dp-size", "--dp-size"),
        ("sglang", "--data-parallel-size", "--dp-size"),
        ("sglang", "--nnodes=2", "--nnodes"),
        ("sglang", "--disaggregation-mode", "--disaggregation-mode"),
    ],
)
def test_layout_flags_the_operator_does_not_generate_are_refused_too(engine, arg, planned):
    """Each replica is one engine the operator places: args may not add data-parallel ranks, nodes or a P/D role."""
    doc = spec_doc(engine={"type": engine, "args": [arg, "2"]})
    with pytest.raises(InvalidSpec, match=rf"{re.escape(repr(arg))} \({planned}\) changes the layout"):
        validate(doc)


def test_tuning_flags_beside_the_layout_stay_the_users():
    # Expert parallelism and DP attention split work inside the engine's NPUs; they change no layout.
    for engine, args in [
        ("vllm-ascend", ["--enable-expert-parallel"]),
        ("sglang", ["--enable-dp-attention"]),
    ]:
        validate(spec_doc(engine={"type": engine, "args": args}))


def test_sglang_does_not_read_underscores_as_dashes():
    # SGLang's parser refuses --tp_size outright (an unknown option), so it is no repeat of --tp-size.
    validate(spec_doc(engine={"type": "sglang", "args": ["--enable-torch-compile"]}))
    problems = []
    try:
        validate(spec_doc(engine={"type": "sglang", "args": ["--tp_size", "2"]}))
    except InvalidSpec as error:
        problems = error.problems
    assert not any("repeats" in p for p in problems)


def test_user_env_replaces_generated_env_in_place():
    env_in = [{"name": "TASK_QUEUE_ENABLE", "value": "0"}, {"name": "EXTRA", "value": "$(HCCL_IF_IP)"}]
    gang = pods(parallelism={"tensor": 8, "pipeline": 2}, engine={"type": "vllm-ascend", "env": env_in})
    env = gang[1]["spec"]["containers"][0]["env"]
    names_in_order = [e["name"] for e in env]
    # A replaced variable keeps its place (earlier than what may refer to it); new names go last.
    assert names_in_order.index("TASK_QUEUE_ENABLE") < names_in_order.index("HCCL_IF_IP")
    assert env[names_in_order.index("TASK_QUEUE_ENABLE")] == {"name": "TASK_QUEUE_ENABLE", "value": "0"}
    assert names_in_order[-1] == "EXTRA" and names_in_order.count("TASK_QUEUE_ENABLE") == 1


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
    more_replicas = obj.spec.model_copy(
        update={"parallelism": obj.spec.parallelism.model_copy(update={"data": 5})}
    )
    assert revision(more_replicas, "llm") == base
    new_image = validate(
        spec_doc(parallelism={"tensor": 2}, engine={"type": "vllm-ascend", "image": "x:2"})
    ).obj
    assert revision(new_image.spec, "llm") != base
    replica = render_replica(obj.spec, Owner("llm", "default", "u-1"), 3)
    assert replica[0]["metadata"]["labels"][names.LABEL_REVISION] == base
    assert replica[0]["metadata"]["labels"][names.LABEL_REPLICA] == "3"


def test_children_are_owned_and_services_select_the_right_pods():
    objs = render_all(AscendInference.model_validate(spec_doc(parallelism={"data": 2})))
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "u-1" for o in objs)
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    assert services["llm"]["spec"]["selector"] == {
        names.LABEL_NAME: "llm",
        names.LABEL_ROLE: "leader",
        names.LABEL_SERVING: "true",
    }
    assert services["llm-pods"]["spec"]["clusterIP"] == "None"
    (pdb,) = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {names.LABEL_NAME: "llm"}}}


@pytest.mark.parametrize(
    ("data", "pipeline", "max_unavailable", "min_available"),
    [
        (2, 4, 1, 7),  # 2 replicas x 4 whole-node pods: one pod (so one replica) out at a time
        (2, 4, 2, 6),
        (3, 1, 1, 2),  # single-pod replicas: pods are replicas
        (1, 1, 3, 0),  # never negative
        (0, 1, 1, 0),
    ],
)
def test_pdb_counts_pods_not_replicas(data, pipeline, max_unavailable, min_available):
    doc = spec_doc(
        parallelism={"tensor": 8, "pipeline": pipeline, "data": data},
        disruption={"maxUnavailable": max_unavailable},
    )
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
        (
            {
                "spec": {
                    "model": {"name": "m", "path": "/m"},
                    "engine": {"type": "vllm-ascend"},
                    "parallelism": {"tensor": 3, "pipeline": 3},
                }
            },
            "spec.parallelism: a replica of 9 NPUs",
        ),
    ],
)
def test_validate_reports_every_problem(doc_change, message):
    with pytest.raises(InvalidSpec, match=message):
        validate({**spec_doc(), **doc_change})


TEMPLATE = {
    "metadata": {"labels": {"team": "search"}, "annotations": {"prometheus.io/scrape": "false"}},
    "spec": {
        "imagePullSecrets": [{"name": "registry"}],
        "serviceAccountName": "engines",
        "priorityClassName": "inference-high",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["npu-a"]}]}
                    ]
                }
            }
        },
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "containers": [
            {
                "name": "engine",
                "env": [{"name": "TASK_QUEUE_ENABLE", "value": "2"}, {"name": "X", "value": "1"}],
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                "resources": {"requests": {"cpu": "12"}},
            },
            {"name": "log-shipper", "image": "fluent/fluent-bit:3.0", "securityContext": RESTRICTED},
        ],
    },
}


def test_template_merges_into_every_pod():
    leader, worker = pods(parallelism={"tensor": 8, "pipeline": 2}, template=TEMPLATE)
    for pod in (leader, worker):
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"]["team"] == "search" and meta["labels"][names.LABEL_NAME] == "llm"
        assert meta["annotations"] == {"prometheus.io/scrape": "false"}
        assert spec["imagePullSecrets"] == [{"name": "registry"}] and spec["serviceAccountName"] == "engines"
        assert spec["affinity"] == TEMPLATE["spec"]["affinity"]
        assert [v["name"] for v in spec["volumes"]] == ["dshm", "cache"]
        engine, sidecar = spec["containers"]
        assert sidecar["name"] == "log-shipper"
        env = [e["name"] for e in engine["env"]]
        assert env.count("TASK_QUEUE_ENABLE") == 1 and env[-1] == "X"
        assert {"name": "TASK_QUEUE_ENABLE", "value": "2"} in engine["env"]
        assert [m["mountPath"] for m in engine["volumeMounts"]] == ["/dev/shm", "/cache"]
        assert engine["resources"]["requests"]["cpu"] == "12" and "memory" in engine["resources"]["requests"]
        assert engine["command"][:2] == ["vllm", "serve"]
        k8s_validate(pod, KUBERNETES_VERSION, strict=True)


def test_template_changes_roll_out():
    plain = validate(spec_doc()).obj
    templated = validate(spec_doc(template={"metadata": {"annotations": {"a": "b"}}})).obj
    assert revision(plain.spec, "llm") != revision(templated.spec, "llm")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({"metadata": {"labels": {names.LABEL_ROLE: "x"}}}, "a label the operator sets"),
        ({"spec": {"hostNetwork": True}}, "spec.template.spec.hostNetwork: not settable"),
        (
            {"spec": {"containers": [{"name": "engine", "command": ["sh"]}]}},
            "the operator sets the engine's command",
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "engine", "resources": {"limits": {"huawei.com/Ascend910": "2"}}}]
                }
            },
            "comes from spec.parallelism",
        ),
        ({"spec": {"volumes": [{"name": "dshm", "emptyDir": {}}]}}, "is the operator's volume"),
        (
            {"spec": {"volumes": [{"name": "etc", "hostPath": {"path": "/etc"}}]}},
            'a hostPath volume is refused by Pod Security "restricted"',
        ),
        ({"spec": {"imagePullSecrets": "registry"}}, "not a valid Pod at spec.imagePullSecrets"),
        ({"spec": {"affinity": {"nodeAfinity": {}}}}, "not a valid Pod"),
    ],
)
def test_template_refuses_what_the_operator_owns_or_kubernetes_rejects(template, message):
    with pytest.raises(InvalidSpec, match=message):
        validate(spec_doc(template=template))


def test_automount_only_when_the_template_asks():
    (pod,) = pods(template={"spec": {"automountServiceAccountToken": True}})
    assert pod["spec"]["automountServiceAccountToken"] is True


def test_volcano_gets_one_pod_group_per_replica():
    objects = render_all(
        validate(
            spec_doc(
                parallelism={"tensor": 8, "pipeline": 2, "data": 2}, scheduling={"schedulerName": "volcano"}
            )
        ).obj
    )
    groups = [o for o in objects if o["kind"] == "PodGroup"]
    assert [g["metadata"]["name"] for g in groups] == ["llm-0", "llm-1"]
    assert groups[0]["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    # Both pods' full requests (8 NPUs, 32 CPUs, 272Gi each by default), as LeaderWorkerSet counts a gang.
    assert groups[0]["spec"] == {
        "minMember": 2,
        "minResources": {"cpu": "64", "huawei.com/Ascend910": "16", "memory": "544Gi"},
    }
    assert groups[0]["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert [p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods] == [
        "llm-0",
        "llm-0",
        "llm-1",
        "llm-1",
    ]
    assert all(p["spec"]["schedulerName"] == "volcano" for p in pods)
    # The group comes before its pods, so Volcano sees it before it sees them.
    replica = render_replica(
        validate(spec_doc(scheduling={"schedulerName": "volcano"})).obj.spec,
        Owner("llm", "default", "u-1"),
        0,
    )
    assert [o["kind"] for o in replica] == ["PodGroup", "Pod"]
    assert not [o for o in render_all(validate(spec_doc()).obj) if o["kind"] == "PodGroup"]
