"""The routed runs of ``bench.failover``: planned operations, then a serving endpoint picker's death, under
steady client traffic.

A client sends one short completion every ``1 / rate`` seconds through the pool's gateway, which calls the
pool's pickers that serve (as a gateway follows the picker Service's Ready endpoints). On a fleet of three
replicas behind two pickers it first counts the requests that fail during a scale-in, a ``restart_service``
drain (the control loop's own patch) and a rollout, each from the change until the fleet is settled again; then
a serving picker's process gets SIGKILL: with both pickers serving (the default), and again with
``leaderElection`` (the leader killed). The picker figures: how long until a steady run of answers resumed
(client side), how many requests failed meanwhile and how many were in flight at the kill, and the floor (none
with both serving; the Lease's duration less its renewal's age at the kill when electing).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.api.times import rfc3339_ms
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import Kube, wait_for
from ascend_fleet.render import drain_patch
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.localpods import LocalPods, install_inference_extension, is_picker_pod
from ascend_fleet_dev.real.pickerfailover import PickerFailover, kill_serving_picker
from ascend_fleet_dev.stack import Stack, stack
from bench.failover import NAME, example, prepare_namespace

NAMESPACE = "picker-failover"
STEADY = 5  # answers in a row that count as served again
MODEL = "qwen2.5-1.5b"  # the served model of the example (spec.model.name)


def completion(url: str, prompt: str, max_tokens: int, model: str = MODEL) -> urllib.request.Request:
    """A short completion request to the OpenAI API at ``url``."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens}).encode()
    return urllib.request.Request(
        url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )


@dataclass
class Traffic:
    """(seconds since start, answered) per request, sent by one thread at a fixed rate to the pool ``pool``
    in ``namespace`` through its gateway; ``ended`` the second each answer (or failure) came, and ``answers``
    the response headers named in ``kept`` that it carried, in the same order."""

    pickers: LocalPods
    rate: float
    namespace: str = NAMESPACE
    pool: str = NAME
    model: str = MODEL
    kept: tuple[str, ...] = ()
    results: list[tuple[float, bool]] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)
    answers: list[dict[str, str]] = field(default_factory=list)
    began: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _one(self) -> tuple[bool, dict[str, str]]:
        url = self.pickers.gateway_url(self.namespace, self.pool)
        if url is None:
            return False, {}
        # A prompt of its own: identical ones would (rightly) draw the picker's prefix-cache affinity to one
        # replica, and a replica that gets no traffic shows no failover.
        request = completion(url, f"{uuid.uuid4().hex} hello", 2, self.model)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                kept = {name: answer.headers[name] for name in self.kept if answer.headers.get(name)}
                return answer.status == 200, kept
        except (urllib.error.URLError, OSError):
            return False, {}

    def run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            answered, kept = self._one()
            self.answers.append(kept)  # before results: a reader of results finds its answer
            self.results.append((sent - self.began, answered))
            self.ended.append(self.now())
            self._stop.wait(max(1 / self.rate - (time.monotonic() - sent), 0))

    def __enter__(self) -> Traffic:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def now(self) -> float:
        """Seconds since the traffic began, on the clock of :attr:`results`."""
        return time.monotonic() - self.began

    def steady(self) -> bool:
        """Whether the last ``STEADY`` requests were all answered."""
        return len(self.results) >= STEADY and all(ok for _, ok in self.results[-STEADY:])


@dataclass
class PickerRun:
    failover: PickerFailover
    served_again: float | None  # seconds from the kill to the first of STEADY answers in a row (client)
    failed: int  # requests that failed between the kill and then
    sent: int
    in_flight: int = 0  # requests sent before the kill and not yet answered at it


def in_flight(traffic: Traffic, killed: float) -> int:
    """Requests sent before ``killed`` whose answer came after it."""
    return sum(t < killed <= end for (t, _), end in zip(traffic.results, traffic.ended, strict=False))


def client_view(results: list[tuple[float, bool]], killed: float) -> tuple[float | None, int]:
    """Seconds from ``killed`` to the first of ``STEADY`` answers in a row (None: not seen), and the
    requests that failed before it."""
    after = [(t, ok) for t, ok in results if t >= killed]
    failed = 0
    for i, (t, ok) in enumerate(after):
        if all(answered for _, answered in after[i : i + STEADY]) and len(after[i : i + STEADY]) == STEADY:
            return t - killed, failed
        failed += not ok
    return None, failed


DRAIN_SECONDS = 3  # spec.disruption.drainSeconds: in-flight requests here last well under a second


def inference(leader_election: bool = False) -> dict:
    doc = example(NAMESPACE)
    # Two pickers, the default; both serve unless they elect a leader.
    doc["spec"]["routing"] = {"mode": "inferencePool", "picker": {"leaderElection": leader_election}}
    doc["spec"]["parallelism"]["data"] = 3
    doc["spec"]["disruption"] = {"maxUnavailable": 1, "drainSeconds": DRAIN_SECONDS}
    return doc


@dataclass
class PlannedRun:
    """Requests that failed (and were sent) from each operation until the fleet settled again, and the engine
    pods it removed (evidence that the operation happened)."""

    failed: dict[str, int]
    sent: dict[str, int]
    removed: dict[str, int] = field(default_factory=dict)


def engine_pods(kube: Kube, namespace: str = NAMESPACE, name: str = NAME) -> list[dict]:
    return [p for p in kube.list("Pod", namespace, {names.LABEL_NAME: name}) if not is_picker_pod(p)]


def settled(kube: Kube, replicas: int, namespace: str = NAMESPACE, name: str = NAME) -> bool:
    """Every wanted replica ready at the current revision (both roles' on a two-role fleet, as its status
    counts them), and no engine pod draining or being deleted."""
    status = kube.get(names.KIND, namespace, name).get("status") or {}
    pods = engine_pods(kube, namespace, name)
    moving = [
        p
        for p in pods
        if p["metadata"].get("deletionTimestamp")
        or p["metadata"]["labels"].get(names.LABEL_SERVING) == "false"
    ]
    return (
        status.get("readyReplicas") == replicas
        and status.get("updatedReplicas") == replicas
        and len(pods) == replicas
        and not moving
    )


def operate(
    kube: Kube,
    traffic: Traffic,
    name: str,
    change: Callable[[], object],
    replicas: int,
    run: PlannedRun,
    namespace: str = NAMESPACE,
    fleet: str = NAME,
) -> None:
    """Apply ``change`` and count the requests that fail until the fleet ``fleet`` is settled at ``replicas``."""
    start, before = len(traffic.results), {p["metadata"]["uid"] for p in engine_pods(kube, namespace, fleet)}
    change()
    time.sleep(1)  # the operator's first write lands before "settled" can be read off the old state
    wait_for(
        lambda: settled(kube, replicas, namespace, fleet),
        180,
        f"the fleet settled after the {name}",
        interval=0.5,
    )
    window = traffic.results[start:]
    run.failed[name], run.sent[name] = sum(not ok for _, ok in window), len(window)
    run.removed[name] = len(before - {p["metadata"]["uid"] for p in engine_pods(kube, namespace, fleet)})
    if not run.removed[name]:
        raise RuntimeError(f"the {name} removed no engine pod: the operation did not happen")


def _planned(kube: Kube, traffic: Traffic) -> PlannedRun:
    run = PlannedRun({}, {})
    operate(kube, traffic, "scale_in", lambda: _patch_spec(kube, {"parallelism": {"data": 2}}), 2, run)

    def restart() -> None:
        (leader,) = [
            p["metadata"]["name"]
            for p in kube.list("Pod", NAMESPACE, {names.LABEL_NAME: NAME, names.LABEL_REPLICA: "0"})
        ]
        kube.patch("Pod", NAMESPACE, leader, drain_patch(rfc3339_ms(time.time()), "rule restart (bench)"))

    operate(kube, traffic, "restart", restart, 2, run)
    rollout = {"template": {"metadata": {"annotations": {"bench.ascendfleet.io/rollout": "1"}}}}
    operate(kube, traffic, "rollout", lambda: _patch_spec(kube, rollout), 2, run)
    return run


def _patch_spec(kube: Kube, spec: dict) -> None:
    kube.patch(names.KIND, NAMESPACE, NAME, {"spec": spec})


@dataclass
class Routed:
    """A routed fleet running: its picker pods (with their gateways) and its simulated engines."""

    pickers: LocalPods
    engines: SimulatedEngines
    model: str = MODEL

    def warm(self) -> None:
        """One request straight to each serving engine. An engine that has served none reports the
        scenario's idle gauges (some KV cache in use) rather than its own (none), and the picker would keep
        choosing the one that has: real engines report the same idle gauges whatever they served."""
        for pod in self.engines.pods():
            address = self.engines.api_endpoint(pod.namespace, pod.name)
            if address is None:
                continue
            with urllib.request.urlopen(
                completion(f"http://{address}", "warm", 1, self.model), timeout=10
            ) as answer:
                answer.read()

    def answered(self) -> dict[str, int]:
        """Requests each serving engine has answered so far, by pod."""
        engines = self.engines
        return {
            p.name: e.received
            for p in engines.pods()
            if (e := engines.engine(p.namespace, p.name)) is not None
        }

    def wait_spread(self, replicas: int, at_least: int = 5) -> dict[str, int]:
        """Wait until each of ``replicas`` engines has answered ``at_least`` requests (the warm-up's one
        aside): the client's traffic reaches every replica an operation or a failure may take away."""

        def spread() -> dict[str, int] | None:
            counts = self.answered()
            return counts if len(counts) == replicas and min(counts.values()) >= at_least + 1 else None

        return wait_for(spread, 60, f"client traffic on all {replicas} replicas")


@contextmanager
def routed(
    local: Stack, namespace: str, doc: dict, *, echoed: Sequence[str] = (), upstream_header: str | None = None
) -> Iterator[Routed]:
    """``doc`` (an inference with ``routing.mode: inferencePool``) applied in ``namespace`` and reconciled
    by the operator, its engines simulated and its picker pods (with their gateways) running here; yields
    once two pickers run and one leads. ``echoed`` and ``upstream_header`` go to the pool's gateway
    (:class:`LocalPods`)."""
    kube = local.cluster.kube()
    name, model = doc["metadata"]["name"], doc["spec"]["model"]["name"]
    install_inference_extension(kube)
    prepare_namespace(kube, namespace)
    engines = SimulatedEngines(Scenario.constant(0.0))
    local.cluster.kubelet.add_listener(engines)
    try:
        with (
            LocalPods(
                kube, local.cluster.control_plane, echoed=echoed, upstream_header=upstream_header
            ) as pickers,
            OperatorThread(OperatorContext(OperatorSettings(), local.cluster.kube()), RunOptions()),
        ):
            local.cluster.kubelet.add_listener(pickers)
            try:
                kube.create(doc)
                wait_for(lambda: len(pickers.pool_routes(namespace, name)) == 2, 180, "two picker pods")
                wait_for(lambda: pickers.route(namespace, name), 60, "a serving picker")
                yield Routed(pickers, engines, model)
            finally:
                local.cluster.kubelet.remove_listener(pickers)
    finally:
        local.cluster.kubelet.remove_listener(engines)
        engines.close()


def run_routed(
    rate: float = 10.0, *, leader_election: bool = False, planned: bool = True
) -> tuple[PlannedRun | None, PickerRun]:
    """With ``planned``, the planned operations first; then a serving picker killed (the leader, with
    ``leader_election``)."""
    with (
        stack(
            real=True, nodes=3, npus_per_node=16, start_seconds=0.2, ready_seconds=0.3, crds=[crd()]
        ) as local,
        routed(local, NAMESPACE, inference(leader_election)) as fleet,
    ):
        pickers = fleet.pickers
        kube = local.cluster.kube()
        wait_for(lambda: settled(kube, 3), 180, "three replicas serving")
        fleet.warm()
        with Traffic(pickers, rate) as traffic:
            wait_for(traffic.steady, 60, "steady answers")
            fleet.wait_spread(3)
            operations = _planned(kube, traffic) if planned else None
            failover = kill_serving_picker(pickers, kube, NAMESPACE, NAME)
            killed = failover.at - traffic.began  # on the traffic's clock
            wait_for(lambda: client_view(traffic.results, killed)[0] is not None, 60, "answers again")
            time.sleep(2)  # the requests in flight at the kill have ended
        served_again, failed = client_view(traffic.results, killed)
    run = PickerRun(failover, served_again, failed, len(traffic.results), in_flight(traffic, killed))
    return operations, run
