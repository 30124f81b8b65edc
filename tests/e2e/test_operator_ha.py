"""Two operator pods from the chart on the real control plane: one acts, a SIGKILL hands over within 15 s.

The chart's operator pods run as local processes with their own arguments and ServiceAccount token (as in
test_operator_pod.py). Each writes with its candidate identity in its User-Agent, so the API server's audit
log tells the two replicas apart: every write of the first must come before every write of the second.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest

from ascend_fleet.api import names
from ascend_fleet.devcluster.fleet.engines import SimulatedEngines
from ascend_fleet.devcluster.fleet.scenario import Scenario
from ascend_fleet.devcluster.real.localpods import LocalPods, operator_container
from ascend_fleet.kube import NotFound, wait_for
from ascend_fleet.kube.client import USER_AGENT
from tests.chart import helm
from tests.e2e.fleet import example
from tests.support.rbac import audit_events

pytestmark = pytest.mark.e2e

TAKEOVER_LIMIT_SECONDS = 15.0
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


@pytest.fixture
def real(cluster):
    if cluster is None or hasattr(cluster, "emulator"):
        pytest.skip("runs the chart's Deployment, which needs the real controllers")
    return cluster


def holder(kube, namespace: str, lease: str) -> str:
    """The Lease's holderIdentity ("" while there is none)."""
    try:
        return (kube.get("Lease", namespace, lease).get("spec") or {}).get("holderIdentity") or ""
    except NotFound:
        return ""


def ready(kube, namespace: str, name: str) -> bool:
    return (kube.get(names.KIND, namespace, name).get("status") or {}).get("readyReplicas") == 1


def test_killing_the_active_operator_hands_over_within_15s_without_double_writes(real, kube, namespace):
    release = f"ha-{uuid.uuid4().hex[:6]}"
    home = f"{release}-system"
    kube.create_namespace(home)
    engines = SimulatedEngines(Scenario.constant(0.0))
    local = LocalPods(kube, real.cluster.control_plane, pickers=False)
    real.kubelet.add_listener(engines)
    real.kubelet.add_listener(local)
    values = {
        "operator": {"watchNamespaces": [namespace], "replicas": 2, "leaderElection": {"enabled": True}}
    }
    try:
        installed = helm.install(real.kubeconfig, release, home, values, driver="secret")
        (args,) = [
            operator_container(o["spec"]["template"])["args"]
            for o in installed.objects
            if o["kind"] == "Deployment"
        ]
        lease = next(a.split("=", 1)[1] for a in args if a.startswith("--leader-elect-lease="))
        wait_for(
            lambda: (
                len([p for p in kube.list("Pod", home) if (home, p["metadata"]["name"]) in local.running()])
                == 2
            ),
            120,
            f"both operator pods running ({local.failures})",
        )
        first = wait_for(lambda: holder(kube, home, lease), 60, "a holder of the leader Lease")
        doc = example("sglang-small.yaml", rules=[])
        doc["metadata"]["namespace"] = namespace
        kube.create(doc)
        name = doc["metadata"]["name"]
        wait_for(lambda: ready(kube, namespace, name), 120, "the fleet reconciled by the elected operator")

        killed_at = time.monotonic()
        assert local.kill(home, first.rsplit("_", 1)[0])
        second = wait_for(lambda: (h := holder(kube, home, lease)) != first and h, 30, "a new holder")
        takeover = time.monotonic() - killed_at
        print(f"operator_takeover_s={takeover:.1f} ({first} -> {second})")
        assert takeover < TAKEOVER_LIMIT_SECONDS

        # The new holder acts: a deleted engine pod comes back, created by it.
        (pod,) = kube.list("Pod", namespace, {names.LABEL_NAME: name})
        kube.delete("Pod", namespace, pod["metadata"]["name"])
        wait_for(
            lambda: any(w[0] == second and w[2] == "pods" for w in writes(real, home)),
            60,
            "the new holder recreating the deleted engine pod",
        )
        wait_for(lambda: ready(kube, namespace, name), 120, "the fleet ready again")

        by_writer = defaultdict(list)
        for identity, stamp, _resource in writes(real, home):
            by_writer[identity].append(stamp)
        assert set(by_writer) == {first, second}, sorted(by_writer)
        assert max(by_writer[first]) < min(by_writer[second]), "the two operators wrote at overlapping times"
        assert lease_verbs(real, home) == {"get", "create", "update"}
    finally:
        real.kubelet.remove_listener(local)
        real.kubelet.remove_listener(engines)
        local.close()
        engines.close()
        kube.delete_namespace(home)


def writes(real, home: str) -> list[tuple[str, str, str]]:
    """(candidate identity, time received, resource) of every write the chart's operators made, bar the Lease."""
    found = []
    for event in audit_events(real.cluster.control_plane.audit_log):
        agent = event.get("userAgent") or ""
        ref = event.get("objectRef") or {}
        user = (event.get("user") or {}).get("username", "")
        if not user.startswith(f"system:serviceaccount:{home}:") or event.get("verb") not in WRITES:
            continue
        if ref.get("resource") == "leases" or not agent.startswith(f"{USER_AGENT} "):
            continue
        found.append((agent.split(" ", 1)[1], event["requestReceivedTimestamp"], ref.get("resource", "")))
    return found


def lease_verbs(real, home: str) -> set[str]:
    """What the chart's operators asked of Leases (the leader-election Role grants exactly these)."""
    return {
        event["verb"]
        for event in audit_events(real.cluster.control_plane.audit_log)
        if (event.get("objectRef") or {}).get("resource") == "leases"
        and (event.get("user") or {}).get("username", "").startswith(f"system:serviceaccount:{home}:")
        and event.get("stage", "ResponseComplete") == "ResponseComplete"
    }
