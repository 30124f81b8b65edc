"""The reconciler's plan for spec.routing: create the routing objects, patch them back, collect them."""

from __future__ import annotations

import copy

from ascend_fleet.api.settings import ReconcileSettings
from ascend_fleet.reconcile.plan import plan_pass
from ascend_fleet.reconcile.writes import Observed
from ascend_fleet.render import Owner, network_policy, render_pdb, render_services, validate
from ascend_fleet.render.routing import PickerSettings, picker_name, render_routing
from ascend_fleet.status.conditions import ROUTING_UNAVAILABLE
from tests.support.documents import inference

NOW = 1_800_000_000.0
SETTINGS = ReconcileSettings(backoff_initial=30, backoff_max=600)
CLASSES = [
    {"name": "long", "priority": 2, "maxQueue": 16, "minPromptTokens": 2049},
    {"name": "short", "priority": 0, "maxQueue": 64},
]


def make(mode="inferencePool", classes=None, gateway=None, name="llm", status=None):
    routing: dict = {"mode": mode}
    if mode == "inferencePool" and classes is not None:
        routing["classes"] = classes
    if gateway:
        routing["gateway"] = {"name": gateway}
    doc = (
        inference(name)
        .namespace("ai")
        .uid("uid-1")
        .generation(2)
        .engine("vllm-ascend", image="engine:v1")
        .parallelism(tensor=8, data=0)
        .spec(routing=routing)
    )
    if status:
        doc.status(status)
    return validate(doc.build())


def served(obj: dict) -> dict:
    """An object as the API server returns it: defaults filled in inside the operator's fields."""
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid=f"uid-{obj['kind']}-{obj['metadata']['name']}", resourceVersion="7")
    if obj["kind"] == "Deployment":
        pod = obj["spec"]["template"]["spec"]
        pod.update(dnsPolicy="ClusterFirst", restartPolicy="Always")
        pod["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
        obj["spec"]["revisionHistoryLimit"] = 10
    if obj["kind"] == "InferencePool":
        obj["spec"]["endpointPickerRef"].update(kind="Service", group="")
        obj["spec"]["appProtocol"] = "http"
    return obj


def existing(valid, picker=None) -> Observed:
    """Everything the fleet's spec renders, as served (the engines' pods left out: data 0)."""
    obj, layout = valid.obj, valid.layout
    owner = Owner.of(obj)
    services = {s["metadata"]["name"]: served(s) for s in render_services(obj.spec, owner, layout)}
    routing: dict = {}
    for child in render_routing(obj.spec, owner, picker):
        if child["kind"] == "Service":
            services[child["metadata"]["name"]] = served(child)
        else:
            routing[(child["kind"], child["metadata"]["name"])] = served(child)
    return Observed(
        services=services,
        pdb=served(render_pdb(obj.spec, owner, layout)),
        network_policy=served(network_policy(obj.spec, owner)),
        routing=routing,
    )


def kinds(objects) -> list[str]:
    return sorted(o["kind"] if isinstance(o, dict) else o.kind for o in objects)


def ready(result) -> dict:
    return next(c for c in result.status["conditions"] if c["type"] == "Ready")


def test_the_pickers_service_comes_first_then_every_routing_object():
    valid = make()
    first = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS)
    assert kinds(first.creates) == ["NetworkPolicy", "PodDisruptionBudget", "Service", "Service", "Service"]
    assert picker_name("llm") in {o["metadata"]["name"] for o in first.creates}

    observed = existing(make(mode="service"))
    observed.services[picker_name("llm")] = served(
        next(o for o in render_routing(valid.obj.spec, Owner.of(valid.obj)) if o["kind"] == "Service")
    )
    second = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert kinds(second.creates) == [
        "ConfigMap",
        "Deployment",
        "InferenceObjective",
        "InferenceObjective",
        "InferenceObjective",
        "InferencePool",
        "PodDisruptionBudget",  # the pickers' budget: both serve by default
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    assert not second.deletes and not second.patches
    for child in second.creates:
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["uid"], ref["controller"]) == ("uid-1", True)


def test_converged_routing_plans_no_writes_despite_server_defaults():
    valid = make(classes=CLASSES, gateway="edge")
    result = plan_pass(valid.obj, valid.layout, existing(valid), NOW, SETTINGS)
    assert not result.writes_children, (result.creates, result.patches, result.deletes)
    assert ready(result)["reason"] != ROUTING_UNAVAILABLE


def test_drifted_routing_objects_are_patched_back():
    valid = make(classes=CLASSES)
    observed = existing(valid)
    config = observed.routing[("ConfigMap", "llm-epp")]
    config["data"]["epp.yaml"] = "edited: by hand\n"
    deployment = observed.routing[("Deployment", "llm-epp")]
    deployment["spec"]["replicas"] = 3
    deployment["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    objective = observed.routing[("InferenceObjective", "llm-long")]
    objective["spec"]["priority"] = 9
    observed.routing[("Role", "llm-epp")]["rules"] = []
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    patches = {(p.kind, p.name): p.body for p in result.patches}
    assert set(patches) == {
        ("ConfigMap", "llm-epp"),
        ("Deployment", "llm-epp"),
        ("InferenceObjective", "llm-long"),
        ("Role", "llm-epp"),
    }
    assert patches[("Deployment", "llm-epp")]["spec"]["replicas"] == 2  # the default, two pickers
    # The rendered rolling update replaces the stored one whole (both pickers serve by default).
    assert patches[("Deployment", "llm-epp")]["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert "selector" not in patches[("Deployment", "llm-epp")]["spec"]
    assert patches[("InferenceObjective", "llm-long")]["spec"]["priority"] == 2
    assert "edited" not in patches[("ConfigMap", "llm-epp")]["data"]["epp.yaml"]
    assert not result.creates and not result.deletes


def test_a_new_picker_image_rolls_the_deployment():
    valid = make()
    observed = existing(valid)
    result = plan_pass(
        valid.obj, valid.layout, observed, NOW, SETTINGS, PickerSettings(image="registry.example/epp:v9")
    )
    (patch,) = result.patches
    assert (patch.kind, patch.name) == ("Deployment", "llm-epp")
    assert patch.body["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/epp:v9"


def test_back_to_service_collects_every_routing_object_the_service_last():
    routed = make(classes=CLASSES, gateway="edge")
    observed = existing(routed)
    valid = make(mode="service")
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    deleted = [(d.kind, d.name) for d in result.deletes]
    assert deleted[0] == ("HTTPRoute", "llm")
    assert deleted[-1] == ("Service", "llm-epp")
    assert sorted(deleted) == sorted([*observed.routing, ("Service", "llm-epp")])
    # The engines' Services stay.
    assert {"llm", "llm-pods"}.isdisjoint({n for k, n in deleted if k == "Service"})
    assert not result.creates and not result.patches
    assert any(e.reason == "Deleted" and "InferencePool llm" in e.message for e in result.events)


def test_a_removed_class_loses_its_objective_only():
    observed = existing(make(classes=CLASSES))
    valid = make(classes=CLASSES[1:])
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert [(d.kind, d.name) for d in result.deletes] == [("InferenceObjective", "llm-long")]
    # ... and the picker's configuration loses its band.
    assert [(p.kind, p.name) for p in result.patches] == [("ConfigMap", "llm-epp")]


def test_objects_on_their_way_out_are_not_deleted_again_nor_recreated_yet():
    valid = make(classes=CLASSES)
    observed = existing(valid)
    observed.routing[("InferencePool", "llm")]["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert not result.writes_children
    assert result.requeue_after is not None
    service = plan_pass(make(mode="service").obj, valid.layout, observed, NOW, SETTINGS)
    assert ("InferencePool", "llm") not in {(d.kind, d.name) for d in service.deletes}


def test_missing_crds_make_ready_false_and_create_no_routing_object():
    valid = make()
    observed = Observed(routing_missing=frozenset({"InferencePool", "InferenceObjective", "HTTPRoute"}))
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    # the engines' own only
    assert kinds(result.creates) == ["NetworkPolicy", "PodDisruptionBudget", "Service", "Service"]
    condition = ready(result)
    assert (condition["status"], condition["reason"]) == ("False", ROUTING_UNAVAILABLE)
    assert "inferencepools.inference.networking.k8s.io" in condition["message"]
    assert "inferenceExtension.installCRDs" in condition["message"]
    (event,) = [e for e in result.events if e.reason == ROUTING_UNAVAILABLE]
    assert event.type == "Warning" and event.with_status
    # Reported once: a later pass with the condition stored says nothing more.
    again = make(status=result.status)
    assert not [
        e
        for e in plan_pass(again.obj, again.layout, observed, NOW, SETTINGS).events
        if e.reason == ROUTING_UNAVAILABLE
    ]
    # Without routing.gateway the Gateway API's CRD is not needed, so it is not named.
    assert "httproutes" not in condition["message"]
    gateway = make(gateway="edge")
    result = plan_pass(
        gateway.obj, gateway.layout, Observed(routing_missing=frozenset({"HTTPRoute"})), NOW, SETTINGS
    )
    assert ready(result)["reason"] == ROUTING_UNAVAILABLE
    assert "httproutes.gateway.networking.k8s.io" in ready(result)["message"]


def test_service_mode_without_crds_is_ready_as_before():
    valid = make(mode="service")
    observed = existing(valid)
    observed.routing_missing = frozenset({"InferencePool", "InferenceObjective", "HTTPRoute"})
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    assert not result.writes_children
    assert (ready(result)["status"], ready(result)["reason"]) == ("True", "AllReplicasReady")


def test_foreign_routing_objects_are_not_observed_so_never_collected():
    """observe_routing keeps only what the object controls; a fleet in mode service with none lists nothing."""
    from ascend_fleet.reconcile.observe import wants_routing_list

    service = served(
        next(o for o in render_routing(make().obj.spec, Owner.of(make().obj)) if o["kind"] == "Service")
    )
    assert wants_routing_list("inferencePool", None, "uid-1")
    assert not wants_routing_list("service", None, "uid-1")
    assert wants_routing_list("service", service, "uid-1")
    assert not wants_routing_list("service", service, "uid-other")
