"""The control loop's cycle writes the KVTransfer condition of a two-role fleet (the hook's wiring), and only
when its status or reason moves."""

from __future__ import annotations

import asyncio
import copy

import yaml

from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.control.queries import Observations
from tests.support.paths import ROOT

NOW = 1_700_000_000.0


class _Kube:
    """The objects by (namespace, name); records status patches and Events."""

    def __init__(self, *bodies: dict):
        self.objects = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in bodies}
        self.patches: list[dict] = []
        self.events: list[tuple[str, str]] = []

    def get(self, kind, namespace, name):
        return copy.deepcopy(self.objects[(namespace, name)])

    def patch(self, kind, namespace, name, body, subresource=None):
        assert subresource == "status" and body["metadata"]["resourceVersion"]
        self.patches.append(body)
        stored = self.objects[(namespace, name)]
        stored.setdefault("status", {}).update(body["status"])
        return stored

    def event(self, body, type_, reason, message):
        self.events.append((type_, reason))

    def list(self, kind, namespace):
        return []  # the device plugin reports no NPU (the safety rules of each role read it)


class _Source:
    list_calls = 0

    def __init__(self, kube: _Kube):
        self.kube = kube

    async def read(self):
        return [copy.deepcopy(b) for b in self.kube.objects.values()], {}


class _Prometheus:
    url = "http://prometheus.invalid"

    def __init__(self, name: str, transferred: float):
        self.name, self.transferred = name, transferred

    async def observe(self, queries, step, at):
        return Observations()

    async def instant(self, promql, at):
        value = self.transferred if "external_kv_transfer" in promql else 3.0
        return [{"metric": {"namespace": "default", "inference": self.name}, "value": [at, str(value)]}]


def _two_roles() -> dict:
    body = yaml.safe_load((ROOT / "examples" / "vllm-disaggregated.yaml").read_text())
    body["metadata"].update(namespace="default", resourceVersion="1", generation=1)
    return body


def test_a_cycle_writes_kv_transfer_when_it_changes():
    body = _two_roles()
    name = body["metadata"]["name"]
    kube = _Kube(body)
    settings = OperatorSettings.model_validate({"prometheus": {"url": _Prometheus.url}})
    prometheus = _Prometheus(name, transferred=512.0)
    loop = ControlLoop(settings, kube, prometheus, clock=lambda: NOW, source=_Source(kube))  # type: ignore[arg-type]

    asyncio.run(loop.cycle())
    (condition,) = [
        c for c in kube.objects[("default", name)]["status"]["conditions"] if c["type"] == "KVTransfer"
    ]
    # Two writes: the rules' MetricsAvailable (the example lists no rules: NoRules), then KVTransfer.
    assert (condition["status"], condition["reason"]) == ("True", "Transferring") and len(kube.patches) == 2

    asyncio.run(loop.cycle())  # same status and reason: no write
    assert len(kube.patches) == 2

    prometheus.transferred = 0.0
    asyncio.run(loop.cycle())
    (condition,) = [
        c for c in kube.objects[("default", name)]["status"]["conditions"] if c["type"] == "KVTransfer"
    ]
    assert (condition["status"], condition["reason"]) == ("False", "NoKVTransfer")
    assert kube.events == [("Warning", "NoKVTransfer")] and len(kube.patches) == 3
