"""spec.routing and spec.scheduling.policy: the rendered InferencePool, endpoint picker and objectives.

The Inference Extension's objects are checked against the upstream CRDs pinned in the chart (release
v1.5.0); the built-in ones with kubernetes-validate. The real control plane applies them too
(tests/e2e/test_routing_real.py).
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import AscendInference
from ascend_fleet.render import InvalidSpec, Owner, render_all, render_services, validate
from ascend_fleet.render.picker_config import OBJECTIVE_HEADER, objective_name, picker_config
from ascend_fleet.render.routing import PickerSettings, render_routing
from ascend_fleet_dev.fleet.serving import ShortRequestFirst, engine_config
from tests.support.crdcheck import api_server_errors
from tests.support.documents import inference
from tests.support.paths import CRD_FILE, ROOT

UPSTREAM = ROOT / "charts" / "ascend-fleet" / "files" / "inference-extension"
UPSTREAM_CRDS = {
    crd["spec"]["names"]["kind"]: crd
    for crd in (yaml.safe_load(path.read_text()) for path in sorted(UPSTREAM.glob("*.yaml")))
}
CRD = yaml.safe_load(CRD_FILE.read_text())


def doc(**spec) -> dict:
    return inference("llm", "qwen").namespace("team-a").uid("u-1").engine("vllm-ascend").spec(**spec).build()


def routed(**spec) -> tuple[AscendInference, list[dict]]:
    obj = validate(doc(routing={"mode": "inferencePool", **spec.pop("routing", {})}, **spec)).obj
    return obj, render_routing(obj.spec, Owner.of(obj))


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def served_schema(crd: dict) -> dict:
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return {**crd, "spec": {**crd["spec"], "versions": [version]}}


def test_service_mode_renders_no_routing_objects():
    obj = validate(doc()).obj
    assert obj.spec.routing.mode == "service"
    assert render_routing(obj.spec, Owner.of(obj)) == []


def test_default_classes_are_the_seeds_three_by_prompt_length():
    obj, objects = routed()
    classes = obj.spec.routing.classes
    assert [(c.name, c.min_prompt_tokens, c.max_queue) for c in classes] == [
        ("long", 2049, 16), ("medium", 513, 32), ("short", 0, 64)]  # fmt: skip
    # > 2048, > 512, the rest; short prompts first.
    assert [obj.spec.routing.class_for(n).name for n in (4096, 2049, 2048, 513, 512, 1)] == [
        "long", "long", "medium", "medium", "short", "short"]  # fmt: skip
    objectives = by_kind(objects, "InferenceObjective")
    assert {o["metadata"]["name"]: o["spec"]["priority"] for o in objectives} == {
        "llm-long": 0, "llm-medium": 1, "llm-short": 2}  # fmt: skip
    assert all(o["spec"]["poolRef"]["name"] == "llm" for o in objectives)


def test_pool_selects_the_serving_leaders_like_the_service():
    obj, objects = routed()
    (pool,) = by_kind(objects, "InferencePool")
    (service, _) = render_services(obj.spec, Owner.of(obj))
    # One label decides both: a drain flips it, so a draining leader leaves the pool and the Service together.
    assert pool["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert pool["spec"]["selector"]["matchLabels"][names.LABEL_SERVING] == "true"
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"]["name"] == "llm-epp"
    (picker_service,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"] == "llm-epp"]
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] in [
        p["port"] for p in picker_service["spec"]["ports"]
    ]
    # Every routing object is owned, so the garbage collector removes it with the AscendInference.
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "u-1" for o in objects)


def test_picker_config_has_one_priority_band_per_class():
    obj, objects = routed(routing={"classes": [
        {"name": "chat", "priority": 10, "maxQueue": 100},
        {"name": "batch", "priority": -1, "sheddable": True, "maxQueue": 5, "minPromptTokens": 1024},
    ]})  # fmt: skip
    (config_map,) = by_kind(objects, "ConfigMap")
    config = yaml.safe_load(config_map["data"]["epp.yaml"])
    assert config == picker_config(obj.spec, Owner.of(obj))
    assert config["featureGates"] == ["flowControl"]
    assert config["flowControl"]["priorityBands"] == [
        {"priority": 10, "maxRequests": 100}, {"priority": -1, "maxRequests": 5}]  # fmt: skip
    assert {p["type"] for p in config["plugins"]} >= {"queue-scorer", "kv-cache-utilization-scorer"}
    (deployment,) = by_kind(objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert (
        args[args.index("--pool-name") + 1] == "llm" and args[args.index("--pool-namespace") + 1] == "team-a"
    )
    assert objective_name("llm", obj.spec.routing.classes[1]) == "llm-batch"
    assert OBJECTIVE_HEADER == "x-gateway-inference-objective"


def test_sglang_pools_read_sglangs_metric_names():
    obj, objects = routed(engine={"type": "sglang"})
    config = picker_config(obj.spec)
    (extractor,) = [p for p in config["plugins"] if p["type"] == "core-metrics-extractor"]
    assert extractor["parameters"] == {"defaultEngine": "sglang"}
    assert by_kind(objects, "InferencePool")[0]["spec"]["targetPorts"] == [{"number": 30000}]


def test_picker_image_comes_from_the_operator_settings():
    obj = validate(doc(routing={"mode": "inferencePool"})).obj
    objects = render_routing(obj.spec, Owner.of(obj), PickerSettings(image="registry.example/epp:v9"))
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/epp:v9"


def test_httproute_only_for_a_named_gateway():
    _, objects = routed()
    assert by_kind(objects, "HTTPRoute") == []
    _, objects = routed(routing={"gateway": {"name": "inference-gw", "namespace": "gateways"}})
    (route,) = by_kind(objects, "HTTPRoute")
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference-gw",
            "namespace": "gateways",
        }
    ]
    assert route["spec"]["rules"][0]["backendRefs"][0] == {
        "group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llm"}  # fmt: skip


@pytest.mark.parametrize("engine", ["vllm-ascend", "sglang"])
def test_inference_extension_objects_fit_the_upstream_crds(engine):
    _, objects = routed(engine={"type": engine}, routing={"classes": [
        {"name": "short", "priority": 2}, {"name": "bulk", "priority": -5, "sheddable": True}]})  # fmt: skip
    checked = 0
    for obj in objects:
        crd = UPSTREAM_CRDS.get(obj["kind"])
        if crd is None:
            continue
        assert (
            obj["apiVersion"] == f"{crd['spec']['group']}/{served_schema(crd)['spec']['versions'][0]['name']}"
        )
        assert api_server_errors(served_schema(crd), obj) == [], obj["kind"]
        checked += 1
    assert checked == 3  # the pool and two objectives


def test_upstream_crd_check_catches_a_bad_pool():
    """The check above can fail: a pool without targetPorts breaks the upstream schema."""
    _, objects = routed()
    (pool,) = by_kind(objects, "InferencePool")
    broken = copy.deepcopy(pool)
    del broken["spec"]["targetPorts"]
    assert api_server_errors(served_schema(UPSTREAM_CRDS["InferencePool"]), broken)


def test_built_in_picker_objects_are_valid_kubernetes():
    _, objects = routed()
    built_in = [o for o in objects if o["kind"] not in UPSTREAM_CRDS and o["kind"] != "HTTPRoute"]
    assert {o["kind"] for o in built_in} == {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment",
                                             "Service", "PodDisruptionBudget"}  # fmt: skip
    for obj in built_in:
        k8s_validate(obj, "1.33", strict=True)


def test_render_all_includes_routing_only_in_pool_mode():
    service_mode = {o["kind"] for o in render_all(validate(doc()).obj)}
    pool_mode = {o["kind"] for o in render_all(validate(doc(routing={"mode": "inferencePool"})).obj)}
    assert "InferencePool" not in service_mode
    assert {"InferencePool", "InferenceObjective", "Deployment"} <= pool_mode
    assert "Service" in pool_mode  # the plain Service stays, for clients inside the cluster


# Validation ------------------------------------------------------------------------------------

BAD = {
    "sheddable with a positive priority": (
        {"routing": {"classes": [{"name": "a", "priority": 1, "sheddable": True}]}}, "sheddable class needs a negative"),
    "negative priority, not sheddable": (
        {"routing": {"classes": [{"name": "a", "priority": -1}]}}, "negative priority makes"),
    "two classes, one priority": (
        {"routing": {"classes": [{"name": "a", "priority": 1}, {"name": "b", "priority": 1}]}}, "priorit"),
    "short-request-first on SGLang": (
        {"engine": {"type": "sglang"}, "scheduling": {"policy": "short-request-first"}}, "needs engine.type vllm-ascend"),
    "unknown mode": ({"routing": {"mode": "mesh"}}, "routing.mode"),
    "class name with capitals": ({"routing": {"classes": [{"name": "Long", "priority": 1}]}}, "classes"),
    "no picker": ({"routing": {"picker": {"replicas": 0}}}, "replicas"),
    "unknown failure mode": ({"routing": {"picker": {"failureMode": "FailSometimes"}}}, "failureMode"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_routing_is_refused_by_the_operator_with_a_message(case):
    spec, message = BAD[case]
    with pytest.raises(InvalidSpec) as error:
        validate(doc(**spec))
    assert any(message in problem for problem in error.value.problems), error.value.problems


@pytest.mark.parametrize("case", [c for c in BAD if c != "negative priority, not sheddable"
                                  and c != "sheddable with a positive priority"])  # fmt: skip
def test_bad_routing_is_refused_by_the_crd_schema(case):
    spec, _ = BAD[case]
    assert api_server_errors(CRD, doc(**spec)), case


def test_duplicate_class_names_are_refused_by_the_crd_as_a_map_list():
    (version,) = CRD["spec"]["versions"]
    classes = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["routing"]["properties"][
        "classes"]  # fmt: skip
    # The API server itself refuses two entries with the same key in a map list.
    assert classes["x-kubernetes-list-type"] == "map" and classes["x-kubernetes-list-map-keys"] == ["name"]


def _picker(objects: list[dict]) -> tuple[dict, dict, dict]:
    (deployment,) = by_kind(objects, "Deployment")
    (role,) = by_kind(objects, "Role")
    (pool,) = by_kind(objects, "InferencePool")
    return deployment, role, pool


def test_two_pickers_by_default_both_serve_roll_one_by_one_and_keep_one_through_a_drain():
    objects = routed()[1]
    deployment, role, pool = _picker(objects)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert "--ha-enable-leader-election" not in container["args"]
    assert {container[p]["grpc"]["service"] for p in ("readinessProbe", "livenessProbe")} == {
        "inference-extension"
    }
    assert all("leases" not in rule["resources"] for rule in role["rules"])
    (apart,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert apart["podAffinityTerm"]["labelSelector"] == deployment["spec"]["selector"]
    (budget,) = by_kind(objects, "PodDisruptionBudget")
    assert budget["spec"] == {"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
    assert budget["metadata"]["labels"]["app.kubernetes.io/component"] == "endpoint-picker"
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"


def test_electing_pickers_recreate_and_only_the_leader_is_ready():
    objects = routed(routing={"picker": {"leaderElection": True}})[1]
    deployment, role, _ = _picker(objects)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "--ha-enable-leader-election" in container["args"]
    assert container["readinessProbe"]["grpc"]["service"] == "readiness"
    assert container["livenessProbe"]["grpc"]["service"] == "liveness"
    assert {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    } in (role["rules"])
    # A standby is never Ready: a budget over the pickers would block every drain of its node.
    assert by_kind(objects, "PodDisruptionBudget") == []


def test_one_picker_runs_alone_without_an_election():
    deployment, role, _ = _picker(routed(routing={"picker": {"replicas": 1}})[1])
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["spec"]["replicas"] == 1 and "affinity" not in deployment["spec"]["template"]["spec"]
    assert "--ha-enable-leader-election" not in container["args"]
    assert {container[p]["grpc"]["service"] for p in ("readinessProbe", "livenessProbe")} == {
        "inference-extension"
    }
    assert all("leases" not in rule["resources"] for rule in role["rules"])


def test_fail_open_reaches_the_pool():
    _, _, pool = _picker(routed(routing={"picker": {"failureMode": "FailOpen"}})[1])
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"


# Engine-level length-aware scheduling -----------------------------------------------------------


def test_short_request_first_reaches_vllm_ascend_as_its_additional_config():
    obj = validate(
        doc(scheduling={"policy": "short-request-first", "shortRequestTokens": 1024, "maxWait": "3s"})
    ).obj
    (pod,) = [o for o in render_all(obj) if o["kind"] == "Pod"]
    command = pod["spec"]["containers"][0]["command"]
    config = json.loads(command[command.index("--additional-config") + 1])
    assert config == {"scheduler_config": {"short_request_first_config": {
        "enabled": True, "threshold": 1024, "long_max_wait_ms": 3000}}}  # fmt: skip
    # The simulated engine reads the same command line as the real one would.
    assert engine_config(command, engine="vllm", default_model="x").short_first == ShortRequestFirst(
        1024, 3.0
    )


def test_fcfs_adds_no_scheduler_config():
    (pod,) = [o for o in render_all(validate(doc()).obj) if o["kind"] == "Pod"]
    assert "--additional-config" not in pod["spec"]["containers"][0]["command"]
