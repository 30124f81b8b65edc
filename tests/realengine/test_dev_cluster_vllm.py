"""A vllm-ascend fleet on the real control plane whose engine pod is a real ``vllm serve`` (``engines="vllm"``).

The operator renders the pod; the real scheduler binds it; the node agent runs it through
:class:`~ascend_fleet_dev.real.realengines.RealEngines`: translated from the pod's own command, on the
pod's IP and ports, Ready once vLLM's ``/health`` answers. Requests go to the Service's endpoint (its
selector's Ready pod, its target port). The operator runs as an administrator here (its RBAC has
tests of its own). Skipped without the control plane or ``make engine-vllm``; under ``CI=true`` that fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import Kube, wait_for
from ascend_fleet_dev.real.realcluster import RealCluster
from ascend_fleet_dev.real.realengines import RealEngines
from ascend_fleet_exporter import metrics
from tests.e2e.conftest import fast_settings
from tests.e2e.fleet import Fleet
from tests.support.documents import inference

from .server import http
from .support import real_vllm_stack

pytestmark = pytest.mark.timeout(1200)
NAMESPACE = "default"
NAME = "tiny"
MODEL = "tiny-llm"
# This project's engine image: the exporter is on (the upstream image has none).
IMAGE = "registry.example.com/ai/vllm-ascend:v0.23.0.post1-fleet1"


@dataclass
class RealFleet:
    cluster: RealCluster
    kube: Kube
    engines: RealEngines
    fleet: Fleet

    def service_endpoint(self) -> str | None:
        """``ip:port`` of the Service's one ready endpoint, resolved as the endpoints controller does.

        The Service's selector picks the Ready pods and its ``targetPort`` names their container port. The
        EndpointSlice itself stays empty here: the API refuses loopback addresses in it, and every local
        pod's IP is one.
        """
        service = self.kube.get("Service", NAMESPACE, NAME)
        selector, (port,) = service["spec"]["selector"], service["spec"]["ports"]
        for pod in self.kube.list("Pod", NAMESPACE, selector):
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
            if conditions.get("Ready") != "True":
                continue
            container_ports = {
                p.get("name"): p["containerPort"]
                for c in pod["spec"]["containers"]
                for p in c.get("ports") or []
            }
            target = port["targetPort"]
            number = target if isinstance(target, int) else container_ports[target]
            return f"{pod['status']['podIP']}:{number}"
        return None


@pytest.fixture(scope="module")
def real_fleet() -> Iterator[RealFleet]:
    with real_vllm_stack(NAMESPACE) as local:
        assert isinstance(local.cluster, RealCluster) and local.real_engines is not None
        with OperatorThread(OperatorContext(fast_settings(), local.kube), RunOptions()):
            fleet = Fleet(local.kube, NAMESPACE)
            doc = inference(NAME, MODEL).engine("vllm-ascend", image=IMAGE).build()
            fleet.apply(doc)
            fleet.wait_ready(NAME, 1, timeout=400)
            yield RealFleet(local.cluster, local.kube, local.real_engines, fleet)


def test_the_engine_pod_is_a_real_vllm_serve_on_the_pods_address(real_fleet):
    (pod,) = real_fleet.fleet.pods(NAME)
    engine = real_fleet.engines.engine(NAMESPACE, pod["metadata"]["name"])
    assert engine is not None and engine.process.running
    assert engine.url == f"http://{pod['status']['podIP']}:8000"
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True"


def test_completions_through_the_service_are_answered_by_vllm(real_fleet):
    endpoint = wait_for(real_fleet.service_endpoint, 60, "the Service's ready endpoint")
    status, text = http("GET", f"http://{endpoint}/version")
    assert status == 200 and json.loads(text)["version"].startswith("0.32.0"), text
    status, text = http(
        "POST",
        f"http://{endpoint}/v1/completions",
        {"model": MODEL, "prompt": "Hello, how are you today?", "max_tokens": 6, "temperature": 0},
    )
    assert status == 200, text
    assert json.loads(text)["model"] == MODEL
    messages = [{"role": "user", "content": "What is a fleet?"}]
    status, text = http(
        "POST",
        f"http://{endpoint}/v1/chat/completions",
        {"model": MODEL, "messages": messages, "max_tokens": 6},
    )
    assert status == 200, text
    assert json.loads(text)["choices"][0]["message"]["role"] == "assistant"


def test_the_pods_metrics_endpoint_carries_vllm_series_and_the_exporter_info(real_fleet):
    (pod,) = real_fleet.fleet.pods(NAME)
    metrics_port = next(
        p["containerPort"]
        for c in pod["spec"]["containers"]
        for p in c.get("ports") or []
        if p["name"] == "npu-metrics"
    )
    http(
        "POST",
        f"http://{pod['status']['podIP']}:8000/v1/completions",
        {"model": MODEL, "prompt": "Hi", "max_tokens": 2},
    )
    status, text = http("GET", f"http://{pod['status']['podIP']}:{metrics_port}/metrics")
    assert status == 200
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    names = {s.name for s in samples}
    assert {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"} <= names
    assert sum(s.value for s in samples if s.name == "vllm:request_success_total") >= 1
    info = [(s.labels, s.value) for s in samples if s.name == metrics.EXPORTER_INFO]
    assert info == [({"backend": metrics.BACKEND_NONE}, 1.0)]
