"""A cycle of the control loop on a two-role fleet: the object and its pods read per role, Prometheus asked the
role's query, and the role's parallelism.data patched (the wiring behind the per-role rules)."""

from __future__ import annotations

import asyncio
import copy

import yaml

from ascend_fleet.api import names
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.api.times import rfc3339
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.control.queries import Observations
from ascend_fleet.render import validate
from ascend_fleet.render.children import render_all
from tests.support.paths import ROOT

from .test_npu_health import device_info, fault

NOW = 1_700_000_000.0
NS = "team-a"
RULE = {"metric": "ttft_p99", "threshold": "2s", "for": "30s", "action": "scale_up", "role": "prefill"}


class _Kube:
    """One object; records its status writes, its spec patches and Events."""

    def __init__(self, body: dict):
        self.body = body
        self.status_writes = 0
        self.spec_patches: list[dict] = []
        self.events: list[tuple[str, str, str]] = []
        self.configmaps: list[dict] = []  # the device plugin's, for npu_unhealthy
        self.pod_patches: list[tuple[str, dict]] = []

    def get(self, kind, namespace, name):
        return copy.deepcopy(self.body)

    def patch(self, kind, namespace, name, body, subresource=None):
        if subresource == "status":
            self.status_writes += 1
            self.body.setdefault("status", {}).update(body["status"])
            self.body["metadata"]["resourceVersion"] = str(int(self.body["metadata"]["resourceVersion"]) + 1)
        elif kind == "Pod":
            self.pod_patches.append((name, body))
        else:
            self.spec_patches.append({k: v for k, v in body.items() if k != "metadata"})
        return copy.deepcopy(self.body)

    def event(self, body, type_, reason, message):
        self.events.append((type_, reason, message))

    def list(self, kind, namespace):
        assert (kind, namespace) == ("ConfigMap", names.DEVICE_INFO_NAMESPACE)
        return copy.deepcopy(self.configmaps)


class _Source:
    list_calls = 0

    def __init__(self, kube: _Kube, pods: list[dict]):
        self.kube, self.pods = kube, pods

    async def read(self):
        body = self.kube.body
        return [copy.deepcopy(body)], {(NS, body["metadata"]["name"]): copy.deepcopy(self.pods)}


class _Prometheus:
    """Answers every window: ``value`` for the series of the prefill role's query, nothing for any other."""

    url = "http://prometheus.invalid"

    def __init__(self, name: str, value: float):
        self.name, self.value = name, value
        self.asked: list[str] = []

    async def observe(self, queries, step, at):
        observations = Observations()
        for query in queries:
            text = query.promql(step)
            self.asked.append(text)
            series = {"namespace": NS, "inference": self.name}
            found = 'pd_role="prefill"' in text
            value = self.value if query.stat != "count" else 100.0
            observations.record(query, [{"metric": series, "value": [at, str(value)]}] if found else [])
        return observations

    async def instant(self, promql, at):
        return []


def _fleet(ratio: dict | None = None) -> tuple[dict, list[dict]]:
    body = yaml.safe_load((ROOT / "examples" / "vllm-disaggregated.yaml").read_text())
    body["metadata"].update(namespace=NS, uid="u1", resourceVersion="1", generation=1)
    body["spec"]["rules"] = [RULE]
    if ratio is not None:
        body["spec"]["disaggregation"]["ratio"] = ratio
    pods = [o for o in render_all(validate(copy.deepcopy(body)).obj) if o["kind"] == "Pod"]
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [{"uid": "u1", "controller": True}]
        pod["status"] = {
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(NOW - 3600)}]
        }
    return body, pods


def _cycle(
    ratio: dict | None = None, ttft: float = 5.0, faulty: tuple[str, int] | None = None
) -> tuple[_Kube, _Prometheus]:
    """One cycle; ``faulty``: the role and replica whose node's NPU the device plugin reports broken (each pod
    on a node of its own)."""
    body, pods = _fleet(ratio)
    kube = _Kube(body)
    for pod in pods:
        labels = pod["metadata"]["labels"]
        node = f"node-{labels[names.LABEL_PD_ROLE]}-{labels[names.LABEL_REPLICA]}"
        pod["spec"]["nodeName"] = node
        healthy = (labels[names.LABEL_PD_ROLE], int(labels[names.LABEL_REPLICA])) != faulty
        kube.configmaps.append(
            device_info(node)
            if healthy
            else device_info(node, unhealthy="Ascend910-1", faults=[fault("Ascend910-1", "SeparateNPU")])
        )
    settings = OperatorSettings.model_validate({"prometheus": {"url": _Prometheus.url}})
    prometheus = _Prometheus(body["metadata"]["name"], ttft)
    loop = ControlLoop(settings, kube, prometheus, clock=lambda: NOW, source=_Source(kube, pods))  # type: ignore[arg-type]
    asyncio.run(loop.cycle())
    return kube, prometheus


def test_a_prefill_rule_that_holds_scales_the_prefill_role_only():
    kube, prometheus = _cycle()
    assert any('up{pd_role="prefill"}' in text for text in prometheus.asked)
    assert kube.spec_patches == [{"spec": {"disaggregation": {"prefill": {"parallelism": {"data": 2}}}}}]
    [record] = kube.body["status"]["actions"]
    assert (record["action"], record["target"], record["result"]) == (
        "scale_up",
        "prefill",
        "prefill replicas 1 -> 2",
    )


def test_a_rule_that_does_not_hold_on_healthy_npus_scales_and_replaces_nothing():
    kube, _ = _cycle(ttft=0.5)
    assert kube.spec_patches == [] and "actions" not in kube.body.get("status", {})
    assert kube.pod_patches == []


def test_a_scale_the_ratio_stops_is_recorded_and_announced_but_not_written():
    kube, _ = _cycle(ratio={"max": 0.5})  # one prefill to two decode: two prefill would be 1 per decode
    assert kube.spec_patches == []
    [record] = kube.body["status"]["actions"]
    assert record["result"].startswith(
        "prefill replicas stay 1: scaling up prefill would make prefill:decode 2:2"
    )
    [(_, reason, message)] = [e for e in kube.events if e[1] == "ScaleUp"]
    assert "above ratio.max 0.5 (spec.disaggregation.ratio)" in message


def test_a_faulty_npu_under_a_decode_replica_replaces_that_decode_replica_only():
    # Both roles number their replicas from 0: prefill 0 shares decode 0's number, not its NPUs.
    kube, _ = _cycle(ttft=0.5, faulty=("decode", 0))
    [(leader, patch)] = kube.pod_patches
    assert leader == "qwen-pd-decode-0"
    assert patch["metadata"]["annotations"][names.ANNOTATION_DRAIN_REASON] == "npu replace"
    [record] = kube.body["status"]["actions"]
    assert (record["action"], record["target"], record["rule"]) == (
        "replace",
        "decode-replica-0",
        "npu_unhealthy > 0 for 30s -> replace decode",
    )


def test_a_faulty_npu_under_the_prefill_replica_replaces_it_and_no_decode_replica():
    kube, _ = _cycle(ttft=0.5, faulty=("prefill", 0))
    assert [leader for leader, _ in kube.pod_patches] == ["qwen-pd-prefill-0"]
    assert [r["target"] for r in kube.body["status"]["actions"]] == ["prefill-replica-0"]
