"""Every status the operator writes is stored as written: the CRD's schema prunes nothing of it.

The API server drops, without an error, any status field its structural schema does not declare.
So the operator's writes are recorded as it sends them, in the situations that produce each kind of
status (start-up, Ready, scaling, a gang restart, an invalid spec, a name conflict, the control
loop's decisions and its MetricsAvailable condition), and each is compared with what the server
answered and with the object read back.
"""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.control.evaluate import Evaluation, MetricsStatus
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.control.model import ControlDecision, FleetState
from ascend_fleet.control.prometheus import Prometheus
from ascend_fleet.kube import wait_for
from tests.e2e.fleet import example

pytestmark = pytest.mark.e2e


def missing(sent, stored, path: str = "status") -> list[str]:
    """Where ``stored`` lacks or differs from what was ``sent`` (lists compared item by item)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path]
        return [
            p
            for key, value in sent.items()
            for p in missing(value, stored.get(key, _ABSENT), f"{path}.{key}")
        ]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [
            p
            for i, (a, b) in enumerate(zip(sent, stored, strict=True))
            for p in missing(a, b, f"{path}[{i}]")
        ]
    return [] if sent == stored else [f"{path}: sent {sent!r}, stored {stored!r}"]


_ABSENT = object()


@pytest.fixture
def recorded(operator, monkeypatch):
    """(object name, sent status, status in the server's answer) of every status write of the operator."""
    writes: list[tuple[str, dict, dict]] = []
    original = operator.kube.patch

    def patch(kind, namespace, name, body, subresource=None):
        answer = original(kind, namespace, name, body, subresource)
        if kind == names.KIND and subresource == "status":
            writes.append((name, body["status"], answer.get("status") or {}))
        return answer

    monkeypatch.setattr(operator.kube, "patch", patch)
    return writes


def record_control_decisions(fleet, operator, settings) -> None:
    """The control loop's part of status: a decision and a dry-run decision in status.actions and
    MetricsAvailable, written by its own code path (no Prometheus needed for the write itself)."""
    loop = ControlLoop(settings, operator.kube, prometheus=Prometheus("http://127.0.0.1:9"))
    body = {"apiVersion": names.API_VERSION, "kind": names.KIND, **fleet.get("qwen-1-5b")}
    state = FleetState(namespace=fleet.namespace, name="qwen-1-5b", replicas=2)
    decision = ControlDecision(
        fleet.namespace,
        "qwen-1-5b",
        "npu_utilization > 85% for 1m",
        "npu_utilization",
        0.91,
        "notify",
        "fleet",
    )
    dry = ControlDecision(
        fleet.namespace,
        "qwen-1-5b",
        "npu_utilization > 85% for 1m",
        "npu_utilization",
        0.93,
        "scale_up",
        "fleet",
        dry_run=True,
        replicas_from=2,
        replicas_to=3,
    )
    metrics = MetricsStatus(False, "InsufficientSamples", "npu_utilization: 3 of 30 samples in the window")
    assert loop.record(body, Evaluation(state, [decision, dry], metrics), now=1_760_000_000.0)


def test_every_status_the_operator_writes_is_stored_unpruned(
    fleet, operator, recorded, local_cluster, settings
):
    # Start-up, Ready, scaling up and down.
    fleet.apply(example("sglang-small.yaml"))
    fleet.wait_ready("qwen-1-5b", 1)
    fleet.scale("qwen-1-5b", 2)
    fleet.wait_ready("qwen-1-5b", 2)

    # A gang restart: status.groupRestarts and Degraded.
    fleet.apply(example("vllm-multinode-tp8-pp4.yaml", parallelism={"tensor": 8, "pipeline": 2, "data": 1}))
    fleet.wait_ready("deepseek-70b", 1)
    local_cluster.kubelet.crash(fleet.namespace, "deepseek-70b-0-1")
    wait_for(
        lambda: fleet.get("deepseek-70b").get("status", {}).get("groupRestarts"), 20, "a restart recorded"
    )
    fleet.wait_ready("deepseek-70b", 1, timeout=30)

    # An invalid spec the schema lets through (a rule over a metric outside the operator's catalog).
    bad = example("sglang-small.yaml")
    bad["metadata"]["name"] = "unknown-metric"
    bad["spec"]["rules"] = [{"metric": "no_such_metric", "threshold": "1", "for": "1m", "action": "notify"}]
    fleet.apply(bad)
    wait_for(
        lambda: fleet.condition("unknown-metric", "Ready").get("reason") == "InvalidSpec", 20, "InvalidSpec"
    )

    # A name conflict.
    fleet.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "held", "namespace": fleet.namespace},
            "spec": {"ports": [{"port": 80}]},
        }
    )
    held = example("sglang-small.yaml")
    held["metadata"]["name"] = "held"
    fleet.apply(held)
    wait_for(lambda: fleet.condition("held", "Ready").get("reason") == "NameConflict", 20, "NameConflict")

    record_control_decisions(fleet, operator, settings)

    assert len(recorded) >= 8, f"expected the scenarios above to write status repeatedly, got {len(recorded)}"
    reasons = {c["reason"] for _, sent, _ in recorded for c in sent.get("conditions", [])}
    assert {"AllReplicasReady", "InvalidSpec", "NameConflict", "InsufficientSamples"} <= reasons, reasons
    assert any(sent.get("groupRestarts") for _, sent, _ in recorded)
    assert any(sent.get("actions") for _, sent, _ in recorded)
    for name, sent, answered in recorded:
        assert missing(sent, answered) == [], (name, sent)
    # And read back: what is stored now holds the last write of each object.
    for name in ("qwen-1-5b", "deepseek-70b", "unknown-metric", "held"):
        last = [sent for n, sent, _ in recorded if n == name][-1]
        assert missing(last, fleet.get(name)["status"]) == [], name
