"""Two operator pods from the chart on the real control plane: one acts, a SIGKILL hands over within 15 s.

The chart's operator pods run as local processes with their own arguments and ServiceAccount token (as in
test_operator_pod.py). Each writes with its candidate identity in its User-Agent, so the API server's audit
log tells the two replicas apart: every write of the first must come before every write of the second.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ascend_fleet.api import names
from ascend_fleet.handlers.leader import LOST_EXIT_CODE
from ascend_fleet.kube import Kube, NotFound, wait_for
from ascend_fleet.kube.client import USER_AGENT
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.localpods import LocalPods, operator_container
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


def holder(kube: Kube, namespace: str, lease: str) -> str:
    """The Lease's holderIdentity ("" while there is none)."""
    try:
        return (kube.get("Lease", namespace, lease).get("spec") or {}).get("holderIdentity") or ""
    except NotFound:
        return ""


def ready(kube: Kube, namespace: str, name: str) -> bool:
    return (kube.get(names.KIND, namespace, name).get("status") or {}).get("readyReplicas") == 1


@dataclass
class HA:
    """Two chart operator pods, both running here, one holding the Lease, and a fleet it reconciled."""

    real: object
    kube: Kube
    local: LocalPods
    home: str
    lease: str
    namespace: str
    name: str
    first: str  # the first holder's identity
    lease_grants: set[str]  # the verbs the chart's leader-election Role grants on Leases

    def holder(self) -> str:
        return holder(self.kube, self.home, self.lease)

    def first_pod(self) -> str:
        return self.first.rsplit("_", 1)[0]

    def new_holder(self) -> str:
        return wait_for(lambda: h if (h := self.holder()) != self.first else "", 30, "a new holder")

    def check_the_new_holder_acts_alone(self, second: str) -> None:
        """A deleted engine pod comes back, created by the new holder, and the two never wrote at once."""
        (pod,) = self.kube.list("Pod", self.namespace, {names.LABEL_NAME: self.name})
        self.kube.delete("Pod", self.namespace, pod["metadata"]["name"])
        wait_for(
            lambda: any(w[0] == second and w[2] == "pods" for w in writes(self.real, self.home)),
            60,
            "the new holder recreating the deleted engine pod",
        )
        wait_for(lambda: ready(self.kube, self.namespace, self.name), 120, "the fleet ready again")
        by_writer = defaultdict(list)
        for identity, stamp, _resource in writes(self.real, self.home):
            by_writer[identity].append(stamp)
        assert set(by_writer) == {self.first, second}, sorted(by_writer)
        assert max(by_writer[self.first]) < min(by_writer[second]), "two operators wrote at overlapping times"
        # What the chart grants on Leases is exactly what the replicas used (the RBAC test's rule, for the Role).
        assert lease_verbs(self.real, self.home) == self.lease_grants


@pytest.fixture
def ha(real, kube, namespace) -> Iterator[HA]:
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
        (deployment,) = [o for o in installed.objects if o["kind"] == "Deployment"]
        args = (operator_container(deployment["spec"]["template"]) or {})["args"]
        lease = next(a.split("=", 1)[1] for a in args if a.startswith("--leader-elect-lease="))
        wait_for(
            lambda: (
                sum((home, p["metadata"]["name"]) in local.running() for p in kube.list("Pod", home)) == 2
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
        grants = {verb for rule in leader_role(installed.objects)["rules"] for verb in rule["verbs"]}
        yield HA(real, kube, local, home, lease, namespace, name, first, grants)
    finally:
        real.kubelet.remove_listener(local)
        real.kubelet.remove_listener(engines)
        local.close()
        engines.close()
        kube.delete_namespace(home)


def test_killing_the_active_operator_hands_over_within_15s_without_double_writes(ha):
    killed_at = time.monotonic()
    (program,) = ha.local.programs(ha.home, ha.first_pod())
    program.kill()  # SIGKILL
    second = ha.new_holder()
    takeover = time.monotonic() - killed_at
    print(f"operator_takeover_s={takeover:.1f} ({ha.first} -> {second})")
    assert takeover < TAKEOVER_LIMIT_SECONDS
    ha.check_the_new_holder_acts_alone(second)


def test_a_frozen_holder_that_wakes_after_losing_the_lease_ends_without_writing(ha):
    """SIGSTOP as a cut from the API longer than the Lease: on SIGCONT the old holder must not act again."""
    (program,) = ha.local.programs(ha.home, ha.first_pod())
    assert program.pid is not None
    os.kill(program.pid, signal.SIGSTOP)
    try:
        second = ha.new_holder()
    finally:
        os.kill(program.pid, signal.SIGCONT)
    wait_for(lambda: program.returncode is not None, 30, "the old holder ending on waking")
    assert program.returncode == LOST_EXIT_CODE
    ha.check_the_new_holder_acts_alone(second)


def leader_role(objects: list[dict]) -> dict:
    """The chart's Role on Leases (it grants nothing else: tests/chart/test_install.py)."""
    (role,) = [
        o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-leader-election")
    ]
    return role


def writes(real, home: str) -> list[tuple[str, str, str]]:
    """(candidate identity, time received, resource) of every write the chart's operators made, bar the Lease."""
    found = []
    for event in audit_events(real.cluster.control_plane.audit_log):
        user_agent = event.get("userAgent") or ""
        ref = event.get("objectRef") or {}
        user = (event.get("user") or {}).get("username", "")
        if not user.startswith(f"system:serviceaccount:{home}:") or event.get("verb") not in WRITES:
            continue
        if ref.get("resource") == "leases" or not user_agent.startswith(f"{USER_AGENT} "):
            continue
        found.append(
            (user_agent.split(" ", 1)[1], event["requestReceivedTimestamp"], ref.get("resource", ""))
        )
    return found


def lease_verbs(real, home: str) -> set[str]:
    """What the chart's operators asked of Leases (the leader-election Role grants exactly these)."""
    return {
        event["verb"]
        for event in audit_events(real.cluster.control_plane.audit_log)
        if (event.get("objectRef") or {}).get("resource") == "leases"
        and (event.get("objectRef") or {}).get("namespace") == home  # not the node Leases it lists
        and (event.get("user") or {}).get("username", "").startswith(f"system:serviceaccount:{home}:")
        and event.get("stage", "ResponseComplete") == "ResponseComplete"
    }
