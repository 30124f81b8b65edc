"""spec.routing.mode inferencePool on the real control plane: the operator creates, owns, patches back and
collects the InferencePool, the endpoint picker's objects and the objectives; without the Inference
Extension's CRDs it says which to install. The real garbage collector removes them with their object."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import NotFound, wait_for
from ascend_fleet.render import Owner, validate
from ascend_fleet.render.picker_config import OBJECTIVE_HEADER
from ascend_fleet.render.routing import picker_name, render_routing
from ascend_fleet.status.conditions import ROUTING_UNAVAILABLE
from ascend_fleet_dev.real.localpods import is_picker_pod
from ascend_fleet_dev.real.pickerfailover import kill_serving_picker
from tests.e2e.conftest import fast_settings
from tests.e2e.fleet import example
from tests.support.paths import ROOT
from tests.support.rbac import audit_events

pytestmark = pytest.mark.e2e

NAME = "qwen-1-5b"
UPSTREAM_CRDS = ROOT / "charts" / "ascend-fleet" / "files" / "inference-extension"
HTTPROUTE_CRD = ROOT / "tests" / "e2e" / "data" / "gateway-api" / "gateway.networking.k8s.io_httproutes.yaml"
CRD_NAMES = (
    "inferencepools.inference.networking.k8s.io",
    "inferenceobjectives.inference.networking.x-k8s.io",
)
CRD_RESOURCES = ("inferencepools", "inferenceobjectives", "httproutes")
CLASSES = [
    {"name": "long", "priority": 2, "maxQueue": 16, "minPromptTokens": 2049},
    {"name": "short", "priority": 0, "maxQueue": 64},
]


@pytest.fixture
def real(cluster):
    if cluster is None or hasattr(cluster, "emulator"):
        pytest.skip("applies the upstream CRDs with kubectl and needs the real garbage collector")
    return cluster


def routed(**routing) -> dict:
    return example("sglang-small.yaml", routing={"mode": "inferencePool", "classes": CLASSES, **routing})


def apply_crds(real, kube) -> None:
    """The Inference Extension's CRDs (as the chart installs them) and the Gateway API's HTTPRoute."""
    real.kubectl("apply", "--server-side", "-f", str(UPSTREAM_CRDS), "-f", str(HTTPROUTE_CRD))
    wait_for(lambda: crds_served(kube), 60, "the Inference Extension CRDs served")
    wait_for(lambda: kube.list("HTTPRoute", None) is not None, 60, "HTTPRoutes served")


def expected(namespace: str, doc: dict) -> set[tuple[str, str]]:
    """(kind, name) of every routing object the renderer gives for ``doc``."""
    body = {**doc, "metadata": {**doc["metadata"], "namespace": namespace, "uid": "u"}}
    obj = validate(body).obj
    return {(o["kind"], o["metadata"]["name"]) for o in render_routing(obj.spec, Owner.of(obj))}


def present(kube, namespace: str, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    found = {}
    for kind, name in wanted:
        with contextlib.suppress(NotFound):
            found[(kind, name)] = kube.get(kind, namespace, name)
    return found


def routing_requests(audit_log, namespace: str) -> int:
    """How many requests for the CRD kinds of routing in ``namespace`` the API server's audit log holds."""
    return sum(
        1
        for event in audit_events(audit_log)
        if (ref := event.get("objectRef") or {}).get("namespace") == namespace
        and ref.get("resource") in CRD_RESOURCES
    )


def crds_served(kube) -> bool:
    try:
        kube.list("InferencePool", None)
        return True
    except NotFound:
        return False


def test_without_the_crds_ready_says_which_to_install(real, fleet, kube, namespace):
    """Runs before the CRDs are applied in this session (tests in a file run in order); where another suite
    applied them already, they are removed first (every test that needs them applies them itself)."""
    if crds_served(kube):
        real.kubectl("delete", "crd", *CRD_NAMES, "--wait=true", "--ignore-not-found")
        wait_for(lambda: not crds_served(kube), 60, "the Inference Extension CRDs to go")
    fleet.apply(routed())
    ready = wait_for(
        lambda: (c := fleet.condition(NAME, "Ready")).get("reason") == ROUTING_UNAVAILABLE and c,
        60,
        "Ready=False/RoutingUnavailable",
    )
    assert ready["status"] == "False"
    assert "inferencepools.inference.networking.k8s.io" in ready["message"]
    assert "inferenceobjectives.inference.networking.x-k8s.io" in ready["message"]
    assert "inferenceExtension.installCRDs" in ready["message"]
    # The Event follows the status write that it announces.
    (event,) = wait_for(lambda: fleet.events(ROUTING_UNAVAILABLE), 10, "the RoutingUnavailable Event")
    assert event["type"] == "Warning" and "inferencepools" in event["message"]
    # The engines are still run; no routing object was created.
    wait_for(lambda: fleet.pod_names(NAME), 60, "the engine pod")
    assert not present(kube, namespace, expected(namespace, routed()))

    # Back to service: Ready as before, and the operator asks the API server nothing about the CRD kinds
    # (read in the API server's audit log over more than one resync interval).
    fleet.patch_spec(NAME, {"routing": {"mode": "service", "classes": None}})
    wait_for(lambda: fleet.ready(NAME, 1), 120, "the fleet ready in mode service")
    audit_log = real.cluster.control_plane.audit_log
    before = routing_requests(audit_log, namespace)
    assert before, "the audit log shows the lists of mode inferencePool"
    time.sleep(fast_settings().reconcile.resync_interval + 1)
    assert routing_requests(audit_log, namespace) == before


def edit_by_hand_and_see_it_patched_back(kube, namespace: str, children: dict) -> None:
    """Edit every routing object as a user might by hand; the operator patches each back (at the latest on the
    resync: routing objects are listed, not watched)."""
    epp = picker_name(NAME)
    ports = children[("InferencePool", NAME)]["spec"]["targetPorts"]
    edits = {
        ("InferenceObjective", f"{NAME}-long"): {"spec": {"priority": 7}},
        ("InferencePool", NAME): {"spec": {"targetPorts": [{"number": 1234}]}},
        ("Deployment", epp): {"spec": {"replicas": 0}},
        ("ConfigMap", epp): {"data": {"epp.yaml": "edited: by hand\n"}},
        ("Role", epp): {"rules": []},
        ("RoleBinding", epp): {"subjects": []},
        ("ServiceAccount", epp): {"metadata": {"labels": {names.LABEL_APP_MANAGED_BY: "someone"}}},
        ("HTTPRoute", NAME): {"spec": {"parentRefs": [{"name": "another-gateway"}]}},
        ("PodDisruptionBudget", epp): {"spec": {"maxUnavailable": 2}},
    }
    for (kind, name), edit in edits.items():
        kube.patch(kind, namespace, name, edit)
    restored = {
        ("InferenceObjective", f"{NAME}-long"): lambda o: o["spec"]["priority"] == 2,
        ("InferencePool", NAME): lambda o: o["spec"]["targetPorts"] == ports,
        ("Deployment", epp): lambda o: o["spec"]["replicas"] == 2,  # spec.routing.picker.replicas' default
        ("ConfigMap", epp): lambda o: "flowControl" in o["data"]["epp.yaml"],
        ("Role", epp): lambda o: len(o["rules"]) == 3,  # reads only: both pickers serve, no Lease
        ("PodDisruptionBudget", epp): lambda o: o["spec"]["maxUnavailable"] == 1,
        ("RoleBinding", epp): lambda o: [s["name"] for s in o["subjects"]] == [epp],
        ("ServiceAccount", epp): lambda o: (
            o["metadata"]["labels"][names.LABEL_APP_MANAGED_BY] == names.MANAGED_BY
        ),
        ("HTTPRoute", NAME): lambda o: [p["name"] for p in o["spec"]["parentRefs"]] == ["edge"],
    }
    wait_for(
        lambda: all(check(kube.get(k, namespace, n)) for (k, n), check in restored.items()),
        30,
        "every hand edit patched back",
    )


def test_inference_pool_objects_are_created_owned_patched_back_and_collected(real, fleet, kube, namespace):
    apply_crds(real, kube)
    doc = routed(gateway={"name": "edge"})
    wanted = expected(namespace, doc)
    assert {k for k, _ in wanted} == {
        "InferencePool",
        "InferenceObjective",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HTTPRoute",
    }
    created = fleet.apply(doc)
    uid = created["metadata"]["uid"]
    children = wait_for(
        lambda: len(found := present(kube, namespace, wanted)) == len(wanted) and found,
        90,
        f"every routing object ({len(wanted)})",
    )
    for (kind, name), child in children.items():
        refs = [r for r in child["metadata"].get("ownerReferences", []) if r.get("controller")]
        assert [(r["uid"], r["kind"]) for r in refs] == [(uid, names.KIND)], (kind, name)
    # The API server accepted the picker's Role, so the operator holds everything it grants (escalation check).
    assert children[("Role", picker_name(NAME))]["rules"]
    objectives = {n: c["spec"]["priority"] for (k, n), c in children.items() if k == "InferenceObjective"}
    assert objectives == {f"{NAME}-long": 2, f"{NAME}-short": 0}
    wait_for(lambda: fleet.ready(NAME, 1), 120, "the fleet ready with its pool")
    wait_for(lambda: fleet.events("Created"), 10, "the Created Event")

    edit_by_hand_and_see_it_patched_back(kube, namespace, children)
    # Events are recorded after the writes they report.
    wait_for(lambda: fleet.events("Updated"), 10, "the Updated Events")

    # A class removed: its objective goes, the rest stays.
    fleet.patch_spec(NAME, {"routing": {"classes": CLASSES[1:], "gateway": None}})
    wait_for(
        lambda: ("InferenceObjective", f"{NAME}-long") not in present(kube, namespace, wanted),
        30,
        "the removed class's objective deleted",
    )
    assert ("InferencePool", NAME) in present(kube, namespace, wanted)
    wait_for(lambda: ("HTTPRoute", NAME) not in present(kube, namespace, wanted), 30, "the HTTPRoute deleted")

    # Back to service: every routing object is deleted by the operator; the engines' Service stays.
    fleet.patch_spec(NAME, {"routing": {"mode": "service", "classes": None}})
    wait_for(lambda: not present(kube, namespace, wanted), 60, "every routing object deleted")
    assert kube.get("Service", namespace, NAME)
    wait_for(
        lambda: any("InferencePool" in e.get("message", "") for e in fleet.events("Deleted")),
        10,
        "the Deleted Event naming the pool",
    )

    # inferencePool again, then the object deleted: the real garbage collector removes what it owned.
    fleet.patch_spec(
        NAME, {"routing": {"mode": "inferencePool", "classes": CLASSES, "gateway": {"name": "edge"}}}
    )
    wait_for(lambda: len(present(kube, namespace, wanted)) == len(wanted), 90, "the routing objects again")
    kube.delete(names.KIND, namespace, NAME)
    wait_for(lambda: not present(kube, namespace, wanted), 90, "the garbage collector to remove them")


def foreign(kind: str, name: str, namespace: str) -> dict:
    """A valid object of ``kind`` that no AscendInference owns."""
    meta = {"name": name, "namespace": namespace, "labels": {"team": "someone-else"}}
    api = {
        "InferencePool": "inference.networking.k8s.io/v1",
        "InferenceObjective": "inference.networking.x-k8s.io/v1alpha2",
        "Deployment": "apps/v1",
        "Role": "rbac.authorization.k8s.io/v1",
        "RoleBinding": "rbac.authorization.k8s.io/v1",
        "HTTPRoute": "gateway.networking.k8s.io/v1",
        "PodDisruptionBudget": "policy/v1",
    }.get(kind, "v1")
    body: dict = {"apiVersion": api, "kind": kind, "metadata": meta}
    if kind == "InferencePool":
        body["spec"] = {
            "selector": {"matchLabels": {"app": "other"}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "other-epp", "port": {"number": 9002}},
        }
    elif kind == "InferenceObjective":
        body["spec"] = {"priority": 5, "poolRef": {"name": "other"}}
    elif kind == "Deployment":
        labels = {"app": "other"}
        body["spec"] = {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "other:v1"}]},
            },
        }
    elif kind == "Role":
        body["rules"] = []
    elif kind == "RoleBinding":
        body["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "other"}
    elif kind == "ConfigMap":
        body["data"] = {"owner": "someone else"}
    elif kind == "HTTPRoute":
        body["spec"] = {"parentRefs": [{"name": "other"}]}
    elif kind == "PodDisruptionBudget":
        body["spec"] = {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "other"}}}
    return body


def test_foreign_objects_holding_routing_names_are_reported_and_left_alone(real, fleet, kube, namespace):
    apply_crds(real, kube)
    doc = routed(gateway={"name": "edge"})
    # Every routing name but the picker's Service (which the others wait for) is taken by someone else.
    taken = {(k, n) for k, n in expected(namespace, doc) if k != "Service"}
    for kind, name in taken:
        kube.create(foreign(kind, name, namespace), exist_ok=False)
    fleet.apply(doc)
    ready = wait_for(
        lambda: (c := fleet.condition(NAME, "Ready")).get("reason") == "NameConflict" and c,
        60,
        "Ready=False/NameConflict",
    )
    assert f"ConfigMap {picker_name(NAME)}" in ready["message"], ready["message"]
    names_taken = {f"{k} {n}" for k, n in taken}
    wait_for(
        lambda: (
            {e["message"].split(" already exists")[0] for e in fleet.events("NameConflict")} == names_taken
        ),
        10,
        "a NameConflict Event for each name taken",
    )
    for kind, name in taken:
        held = kube.get(kind, namespace, name)
        assert held["metadata"]["labels"] == {"team": "someone-else"}, (kind, name)
        assert not held["metadata"].get("ownerReferences"), (kind, name)
    assert kube.get("ConfigMap", namespace, picker_name(NAME))["data"] == {"owner": "someone else"}

    # Once the names are free the operator creates its own (after the refusal's backoff).
    for kind, name in taken:
        kube.delete(kind, namespace, name)
    wanted = expected(namespace, doc)
    wait_for(
        lambda: (
            all(c["metadata"].get("ownerReferences") for c in present(kube, namespace, wanted).values())
            and len(present(kube, namespace, wanted)) == len(wanted)
        ),
        60,
        "the operator's own routing objects",
    )


@pytest.fixture
def picker_pods(real, kube):
    """The simulated nodes run engine pods as serving engines and picker pods as the upstream picker."""
    from ascend_fleet_dev.fleet.engines import SimulatedEngines
    from ascend_fleet_dev.fleet.scenario import Scenario
    from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable
    from ascend_fleet_dev.real.localpods import LocalPods

    try:
        pickers = LocalPods(kube, real.cluster.control_plane)
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the data plane: {error}")
        pytest.skip(str(error))
    engines = SimulatedEngines(Scenario.constant(0.0))
    real.kubelet.add_listener(engines)
    real.kubelet.add_listener(pickers)
    try:
        yield engines, pickers
    finally:
        real.kubelet.remove_listener(pickers)
        real.kubelet.remove_listener(engines)
        pickers.close()
        engines.close()


def complete(url: str, objective: str | None) -> tuple[int, str]:
    """One completion through ``url`` naming ``objective`` (status, body)."""
    headers = {"Content-Type": "application/json"}
    if objective:
        headers[OBJECTIVE_HEADER] = objective
    body = json.dumps({"model": "qwen2.5-1.5b", "prompt": f"{uuid.uuid4().hex} hello", "max_tokens": 4})
    request = urllib.request.Request(url + "/v1/completions", data=body.encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, OSError) as error:
        return 0, str(error)


def test_requests_flow_through_the_operators_picker_pod(real, fleet, kube, namespace, picker_pods):
    """The picker Deployment the operator renders runs on a simulated node as the upstream picker, with the
    rendered flags, ConfigMap and ServiceAccount; requests through its gateway reach the fleet's engines.
    Deleting the picker pod brings a new one (the real Deployment controller) and the route follows it."""
    engines, pickers = picker_pods
    apply_crds(real, kube)
    doc = routed()
    fleet.apply(doc)
    wait_for(lambda: fleet.ready(NAME, 1), 120, "the fleet ready with its pool")
    route = wait_for(
        lambda: pickers.route(namespace, NAME), 120, f"the picker pod running\n{pickers.failures}"
    )
    (leader,) = [p["metadata"]["name"] for p in fleet.pods(NAME) if not is_picker_pod(p)]
    engine = wait_for(lambda: engines.engine(namespace, leader), 30, "the serving engine")
    before = engine.received
    answered = wait_for(
        lambda: (reply := complete(route.url, f"{NAME}-short"))[0] == 200 and reply,
        60,
        "an answer via the picker",
    )
    assert json.loads(answered[1])["choices"], answered
    assert engine.received > before  # the request reached the fleet's engine, not something else
    # An objective the fleet does not define is no class of its; the picker still serves it (priority 0).
    assert complete(route.url, None)[0] == 200

    # The real Deployment controller replaces a deleted picker pod; the gateway follows the new one.
    old = route.picker
    kube.delete("Pod", namespace, old)
    moved = wait_for(
        lambda: (r := pickers.route(namespace, NAME)) is not None and r.picker != old and r,
        120,
        "a new picker",
    )
    wait_for(lambda: complete(moved.url, f"{NAME}-long")[0] == 200, 60, "an answer via the new picker")

    # The picker read the API as the rendered ServiceAccount (its token), not as an admin: its watches are in
    # the audit log once they ended, with the old picker.
    account = f"system:serviceaccount:{namespace}:{picker_name(NAME)}"
    wait_for(
        lambda: account in audited_users(real.cluster.control_plane.audit_log, namespace, "inferencepools"),
        30,
        f"{account} in the audit log, watching the InferencePool",
    )


def audited_users(audit_log, namespace: str, resource: str) -> set[str]:
    """The users that asked the API server for ``resource`` in ``namespace``, from its audit log."""
    return {
        (event.get("user") or {}).get("username")
        for event in audit_events(audit_log)
        if (ref := event.get("objectRef") or {}).get("namespace") == namespace
        and ref.get("resource") == resource
    }


def test_a_standby_picker_takes_over_when_the_leader_dies(real, fleet, kube, namespace, picker_pods):
    """Two picker pods with ``leaderElection`` elect a leader through a Lease; only the leader serves. SIGKILL
    of the leader's process (no Lease release) hands the pool to the standby once the Lease expires."""
    _, pickers = picker_pods
    apply_crds(real, kube)
    fleet.apply(routed(picker={"leaderElection": True}))
    wait_for(lambda: fleet.ready(NAME, 1), 120, "the fleet ready with its pool")
    routes = wait_for(
        lambda: len(r := pickers.pool_routes(namespace, NAME)) == 2 and r,
        120,
        f"two picker pods running\n{pickers.failures}",
    )
    leader = wait_for(lambda: pickers.route(namespace, NAME), 60, "an elected picker")
    assert [r.serves() for r in routes].count(True) == 1, "exactly one picker leads"
    wait_for(lambda: complete(leader.url, f"{NAME}-short")[0] == 200, 60, "an answer via the leader")

    failover = kill_serving_picker(pickers, kube, namespace, NAME)

    assert failover.killed == leader and not any(p.running for p in pickers.programs(namespace, leader.picker)
                                                 if p.name == "epp"), "the leader's picker was killed"  # fmt: skip
    assert failover.holder_after != failover.holder_before, "the Lease changed hands"
    wait_for(
        lambda: complete(failover.serving.url, f"{NAME}-long")[0] == 200, 60, "an answer via the new leader"
    )
    # The standby cannot take the Lease before it expires; the figure goes to docs/routing.md.
    assert failover.seconds >= failover.floor - 1
    print(
        f"picker takeover after SIGKILL of the leader: {failover.seconds:.1f} s (floor {failover.floor:.1f} s)"
    )


def test_two_serving_pickers_lose_only_the_requests_in_flight_when_one_dies(
    real, fleet, kube, namespace, picker_pods
):
    """Two picker pods (the default) both serve behind the pool's gateway, which spreads its streams over
    them. SIGKILL of one under traffic from four clients: the gateway stops calling it and every request sent
    after the kill is answered; only requests in flight at that instant may fail."""
    _, pickers = picker_pods
    apply_crds(real, kube)
    fleet.apply(routed())
    wait_for(lambda: fleet.ready(NAME, 1), 120, "the fleet ready with its pool")
    routes = wait_for(
        lambda: len(r := pickers.pool_routes(namespace, NAME)) == 2 and all(x.serves() for x in r) and r,
        120,
        f"two serving picker pods\n{pickers.failures}",
    )
    gateway = pickers.gateway(namespace, NAME)
    assert gateway is not None and {r.url for r in routes} == {gateway.url}, "one gateway for the pool"
    wait_for(lambda: complete(gateway.url, f"{NAME}-short")[0] == 200, 60, "an answer via the gateway")

    spans: list[tuple[float, float, int]] = []  # (sent, answered, status) per request

    def client(stop: float) -> None:
        while time.monotonic() < stop:
            sent = time.monotonic()
            status, _ = complete(gateway.url, f"{NAME}-short")
            spans.append((sent, time.monotonic(), status))

    stop = time.monotonic() + 12
    clients = [threading.Thread(target=client, args=(stop,)) for _ in range(4)]
    for thread in clients:
        thread.start()
    time.sleep(4)
    before = gateway.host_stats("endpoint_picker")
    assert all(before.get(r.grpc, {}).get("rq_total", 0) > 0 for r in routes), (
        f"both pickers served: {before}"
    )
    failover = kill_serving_picker(pickers, kube, namespace, NAME)
    # A request is in flight at the death from the SIGKILL until the process is reaped: what the gateway sent
    # on its open connection in between reaches a process that can no longer answer.
    killed_at, dead_at = failover.at, failover.dead_at
    for thread in clients:
        thread.join(30)

    victim = failover.killed
    assert not any(p.running for p in pickers.programs(namespace, victim.picker) if p.name == "epp")
    after = gateway.host_stats("endpoint_picker")
    assert after[failover.serving.grpc]["rq_total"] > before[failover.serving.grpc]["rq_total"]
    sent_after = [s for s in spans if s[0] > dead_at]
    assert len(sent_after) > 20, "traffic went on after the kill"
    failed = [s for s in spans if s[2] != 200]
    in_flight = [s for s in spans if s[0] <= dead_at and s[1] >= killed_at]
    late = [f"{s[0] - dead_at:+.3f} s" for s in failed if s[0] > dead_at]
    assert not late and all(s[1] >= killed_at for s in failed), (
        f"{len(failed)} failed; sent after the picker was reaped ({dead_at - killed_at:.3f} s after the "
        f"SIGKILL), by: {late}"
    )
    print(
        f"picker death, both serving: {len(failed)} failed of {len(spans)} "
        f"({len(in_flight)} in flight at the kill; the process was reaped {dead_at - killed_at:.3f} s after "
        "its SIGKILL)"
    )
