"""The Service-mode run of ``bench.failover``: a node dies under one of two replicas of a fleet with
``routing.mode: service`` (the default), on a control plane with the upstream node grace period, and nobody
taints anything.

A client sends one short completion every ``1 / rate`` seconds to a random ready endpoint of the fleet's serving
Service, as kube-proxy does: the endpoints are the pods the Service selects that are Ready and not being deleted
(what an EndpointSlice lists as ready), read from the API every 0.25 s. (The dev cluster's pod IPs are loopback
addresses, which EndpointSlices refuse, so the client reads the pods themselves; an engine keeps the address it
was first seen at, so a dead one is still tried until it leaves the endpoints.)

Left to Kubernetes, the dead replica would stay in the endpoints until the node controller's grace period (50 s)
and would never be made again without the ``out-of-service`` taint. The figures: when the client's requests stopped
failing after the power cut (``service_node_failover_s``: the first answer after the last failure), how many of its requests failed until then
(``failed_requests_service_node``), and when the replica served again on another node
(``replica_restored_untainted_s``); through the API, when the dead leader left the Service.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field

from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import Kube, KubeError, wait_for
from ascend_fleet.observed import pod_ready
from ascend_fleet.render.metadata import serving_selector
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.nodefailure import NodeFailure, kill_serving_node, serving_leaders
from bench.failover import NAME, example, node_death_stack, prepare_namespace
from bench.failover.picker import STEADY, client_view, completion

NAMESPACE = "service-failover"
UPSTREAM_GRACE_SECONDS = 50  # kube-controller-manager's default --node-monitor-grace-period (1.32+)
ENDPOINTS_REFRESH_SECONDS = 0.25
REQUEST_TIMEOUT_SECONDS = 2.0


def inference() -> dict:
    """Two replicas spread over nodes, in routing mode service (the default), no toleration of our own."""
    doc = example(NAMESPACE)
    doc["spec"].update(
        parallelism={"tensor": 2, "data": 2},
        autoscaling={"minReplicas": 2, "maxReplicas": 2},
        availability={"spread": "node"},
    )
    doc["spec"].pop("routing", None)
    return doc


@dataclass
class ServiceClient:
    """Requests to random ready endpoints of the serving Service, as kube-proxy sends them."""

    kube: Kube
    engines: SimulatedEngines
    rate: float = 10.0
    results: list[tuple[float, bool]] = field(default_factory=list)
    began: float = field(default_factory=time.monotonic)
    endpoints: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)  # pod uid -> the address its engine had
    _stop: threading.Event = field(default_factory=threading.Event)

    def follow(self) -> None:
        while not self._stop.wait(ENDPOINTS_REFRESH_SECONDS):
            try:
                pods = self.kube.list("Pod", NAMESPACE, serving_selector(NAME))
            except KubeError:
                continue
            ready = []
            for pod in pods:
                meta = pod["metadata"]
                address = self.engines.api_endpoint(NAMESPACE, meta["name"])
                if address and meta["uid"] not in self.addresses:
                    self.addresses[meta["uid"]] = address
                if pod_ready(pod) and not meta.get("deletionTimestamp") and meta["uid"] in self.addresses:
                    ready.append(self.addresses[meta["uid"]])
            self.endpoints = sorted(ready)

    def one(self) -> bool:
        endpoints = self.endpoints
        if not endpoints:
            return False
        request = completion(f"http://{random.choice(endpoints)}", f"{uuid.uuid4().hex} hello", 2)
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def send(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            self.results.append((sent - self.began, self.one()))
            self._stop.wait(max(1 / self.rate - (time.monotonic() - sent), 0))

    def __enter__(self) -> ServiceClient:
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self.follow, self.send)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def now(self) -> float:
        return time.monotonic() - self.began

    def steady(self) -> bool:
        return len(self.results) >= STEADY and all(ok for _, ok in self.results[-STEADY:])


@dataclass
class ServiceRun:
    failure: NodeFailure
    failover: float | None  # client: from the cut to the first answer after the last failed request
    failed: int  # requests that failed from the cut until then
    sent: int  # requests sent from the cut until the run ended
    dead_replica_answered: int  # requests the dead node's engine answered before the cut


def run_service(rate: float = 10.0, grace: int = UPSTREAM_GRACE_SECONDS) -> ServiceRun:
    """One cluster at the upstream grace period, one Service-mode fleet under client traffic, one node death."""
    with node_death_stack(grace) as local:
        kube = local.cluster.kube()
        prepare_namespace(kube, NAMESPACE)
        engines = SimulatedEngines(Scenario.constant(0.0))
        local.cluster.kubelet.add_listener(engines)
        try:
            with OperatorThread(OperatorContext(OperatorSettings(), local.cluster.kube()), RunOptions()):
                kube.create(inference())
                wait_for(
                    lambda: len(set(serving_leaders(kube, NAMESPACE, NAME).values())) == 2, 120, "2 nodes"
                )
                with ServiceClient(kube, engines, rate) as client:
                    wait_for(lambda: len(client.endpoints) == 2 and client.steady(), 60, "steady answers")
                    time.sleep(3)  # both replicas take some of the traffic
                    before = _answered(engines)
                    killed = client.now()
                    failure = kill_serving_node(
                        local.cluster.kubelet, kube, NAMESPACE, NAME, grace, timeout=120, restore=True
                    )
                    wait_for(lambda: client_view(client.results, killed)[0] is not None, 30, "answers again")
                    time.sleep(5)  # the settled answers after the failover
        finally:
            local.cluster.kubelet.remove_listener(engines)
            engines.close()
    failover, failed = settled_view(client.results, killed)
    sent = sum(1 for t, _ in client.results if t >= killed)
    dead = sum(before.get(pod, 0) for pod in failure.pods)
    return ServiceRun(failure, failover, failed, sent, dead)


def settled_view(results: list[tuple[float, bool]], killed: float) -> tuple[float | None, int]:
    """Seconds from ``killed`` to the first answer after the last failed request (None: the last one failed),
    and the requests that failed after ``killed``. A client that picks endpoints at random can answer several
    times in a row while the dead one is still listed, so "steady" means: no failure ever after."""
    after = [(t, ok) for t, ok in results if t >= killed]
    failed = sum(not ok for _, ok in after)
    last_failure = max((i for i, (_, ok) in enumerate(after) if not ok), default=-1)
    if last_failure == len(after) - 1:
        return None, failed
    return after[last_failure + 1][0] - killed, failed


def _answered(engines: SimulatedEngines) -> dict[str, int]:
    return {
        p.name: e.received for p in engines.pods() if (e := engines.engine(p.namespace, p.name)) is not None
    }
