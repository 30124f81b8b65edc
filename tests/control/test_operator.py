"""The control loop end to end: the operator, a local Kubernetes API, simulated engines and a real Prometheus.

Each test gets its own namespace and its own operator watching only that namespace, so tests do not
see each other's objects. Windows are seconds long; the loop runs every second at one-second steps.
Assertions go through the Kubernetes API only (objects, pods, events).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import kubernetes.client
import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.handlers.control import control_loop_hook
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import Kube, scaled, wait_for
from ascend_fleet.observed import pod_ready
from ascend_fleet_dev.cluster import DevCluster
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.prometheus import PrometheusServer
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.testing import api_client
from tests.support.documents import inference as inference_document
from tests.support.paths import CRD_FILE
from tests.support.rbac import HARNESS, record_operator_requests

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e]

INTERVAL = STEP = SCRAPE = 1.0
WINDOW = 3.0
BASELINE = 0.5  # every engine's utilization unless a test pins another value


@dataclass
class Env:
    cluster: DevCluster
    prometheus: PrometheusServer
    scenario: Scenario
    kube: Kube  # the test's own client; the operator has another
    core: kubernetes.client.CoreV1Api


@pytest.fixture(scope="module")
def env(prometheus_binary) -> Iterator[Env]:
    scenario = Scenario.constant(0.0)
    with (
        PrometheusServer(binary=prometheus_binary, startup_timeout=scaled(30.0)) as prometheus,
        DevCluster(start_seconds=0.1, ready_seconds=0.1, nodes=8) as cluster,
        SimulatedEngines(scenario, prometheus=prometheus) as engines,
    ):
        cluster.kubelet.add_listener(engines)
        client = api_client(cluster.url)
        kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(
            yaml.safe_load(CRD_FILE.read_text())
        )
        yield Env(
            cluster,
            prometheus,
            scenario,
            Kube(client, user_agent=HARNESS),
            kubernetes.client.CoreV1Api(client),
        )
        record_operator_requests(cluster, "control")


@pytest.fixture()
def namespace(env: Env) -> Iterator[str]:
    name = f"c-{uuid.uuid4().hex[:8]}"
    env.core.create_namespace({"metadata": {"name": name}})
    yield name
    env.scenario.clear(name)
    # Stop the namespace's engines (the operator is gone by now, so nothing recreates them).
    for pod in env.kube.list("Pod", name):
        env.kube.delete("Pod", name, pod["metadata"]["name"])


@contextlib.contextmanager
def operator(env: Env, namespace: str, **control) -> Iterator[None]:
    """The operator with its control loop, watching one namespace."""
    settings = OperatorSettings.model_validate(
        {
            "prometheus": {"url": env.prometheus.url, "timeout": "2s"},
            "control": {"interval": INTERVAL, "step": STEP, **control},
            "reconcile": {"backoffInitial": "1s", "resyncInterval": "2s"},
        }
    )
    kube = Kube(api_client(env.cluster.url))
    ctx = OperatorContext(settings, kube)
    ctx.extra_startup.append(control_loop_hook(ControlLoop(settings, kube, namespaces=[namespace])))
    with OperatorThread(ctx, RunOptions(namespaces=[namespace])) as thread:
        yield
    assert thread.error is None


def inference(env: Env, namespace: str, name: str, replicas: int, rules: list[dict], **autoscaling) -> None:
    defaults = {
        "minReplicas": 1,
        "maxReplicas": 8,
        "scaleUpCooldown": "60s",
        "scaleDownCooldown": "60s",
        "restartCooldown": "60s",
    }
    env.kube.create(
        inference_document(name, name, "/models/m")
        .namespace(namespace)
        .engine("vllm-ascend")
        .parallelism(tensor=1, pipeline=1, data=replicas)
        .rules(rules)
        .section("autoscaling", **(defaults | autoscaling))
        .section("disruption", maxUnavailable=1, drainSeconds=1)
        .build()
    )


def rule(metric: str, comparison: str, threshold: object, action: str, window: float = WINDOW) -> dict:
    return {
        "metric": metric,
        "comparison": comparison,
        "threshold": threshold,
        "for": f"{window:g}s",
        "action": action,
    }


UP = rule("npu_utilization", ">", "80%", "scale_up")
DOWN = rule("npu_utilization", "<", "30%", "scale_down")
FRAGMENTED = rule("mem_fragmentation", ">", "15%", "restart_service")


def get(env: Env, namespace: str, name: str) -> dict:
    return env.kube.get(names.KIND, namespace, name)


def replicas(env: Env, namespace: str, name: str) -> int:
    return get(env, namespace, name)["spec"]["parallelism"]["data"]


def actions(env: Env, namespace: str, name: str) -> list[dict]:
    return (get(env, namespace, name).get("status") or {}).get("actions") or []


def condition(env: Env, namespace: str, name: str, type_: str) -> dict:
    conditions = (get(env, namespace, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def events(env: Env, namespace: str, name: str, reason: str) -> list[dict]:
    return [
        e
        for e in env.kube.list("Event", namespace)
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def leaders(env: Env, namespace: str, name: str) -> dict[int, dict]:
    pods = env.kube.list("Pod", namespace, {names.LABEL_NAME: name, names.LABEL_ROLE: names.ROLE_LEADER})
    return {
        int(p["metadata"]["labels"][names.LABEL_REPLICA]): p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }


def serving(pod: dict) -> bool:
    return pod_ready(pod) and pod["metadata"]["labels"].get(names.LABEL_SERVING) == "true"


def ready_and_scraped(env: Env, namespace: str, name: str, count: int) -> None:
    """Every replica serves and Prometheus has its series: the starting line for timing a rule."""
    wait_for(
        lambda: (get(env, namespace, name).get("status") or {}).get("readyReplicas") == count,
        what=f"{name} to have {count} ready replicas",
        timeout=20.0,
    )
    query = f'count(ascend_fleet_npu_utilization_ratio{{namespace="{namespace}",inference="{name}"}})'
    wait_for(
        lambda: [float(r["value"][1]) for r in env.prometheus.query(query)] == [count],
        what=f"Prometheus to scrape {name}'s {count} pods",
        timeout=20.0,
    )


# Long enough for a cycle to see a rule that still holds: without a cooldown or a bound, it would act again.
SETTLE = 3 * INTERVAL
SLACK = 2.0  # status write, API latency and polling, on a busy 2-core machine


def test_scale_rules_act_once_per_cooldown_within_min_and_max_and_ignore_short_spikes(env, namespace):
    env.scenario.set(namespace, "steady", utilization=BASELINE)
    env.scenario.set(namespace, "spiky", utilization=BASELINE)
    env.scenario.set(namespace, "capped", utilization=0.95)
    env.scenario.set(namespace, "quiet", utilization=0.1)
    with operator(env, namespace):
        inference(env, namespace, "steady", 1, [UP])
        inference(env, namespace, "spiky", 1, [UP])
        inference(env, namespace, "capped", 1, [UP], maxReplicas=2, scaleUpCooldown="1s")
        inference(env, namespace, "quiet", 3, [UP, DOWN], minReplicas=2, scaleDownCooldown="1s")
        for name in ("steady", "spiky"):
            ready_and_scraped(env, namespace, name, 1)

        started = time.time()
        env.scenario.set(namespace, "steady", utilization=0.95)
        env.scenario.set(namespace, "spiky", utilization=0.95)
        time.sleep(WINDOW / 2)
        env.scenario.set(namespace, "spiky", utilization=BASELINE)
        wait_for(lambda: replicas(env, namespace, "steady") == 2, what="the scale-up", timeout=20.0)
        delay = time.time() - started
        print(
            f"\ncondition -> scale_up: {delay:.2f}s (for {WINDOW:g}s, interval {INTERVAL:g}s, scrape {SCRAPE:g}s)"
        )
        assert WINDOW <= delay <= WINDOW + INTERVAL + SCRAPE + STEP + SLACK
        wait_for(lambda: replicas(env, namespace, "quiet") == 2, what="the scale-down", timeout=20.0)
        wait_for(
            lambda: replicas(env, namespace, "capped") == 2, what="the scale-up to maxReplicas", timeout=20.0
        )

        # Every rule still holds, but scaleUpCooldown (60s), maxReplicas and minReplicas keep the counts.
        time.sleep(SETTLE)
        assert replicas(env, namespace, "steady") == 2
        [record] = actions(env, namespace, "steady")
        assert (record["action"], record["target"], record["result"], record["dryRun"]) == (
            "scale_up",
            "fleet",
            "replicas 1 -> 2",
            False,
        )
        assert record["rule"] == "npu_utilization > 80% for 3s -> scale_up" and record["value"] >= 0.8
        assert len(events(env, namespace, "steady", "ScaleUp")) == 1
        assert replicas(env, namespace, "capped") == 2
        assert [a["action"] for a in actions(env, namespace, "capped")] == ["scale_up"]
        assert replicas(env, namespace, "quiet") == 2
        assert [(a["action"], a["result"]) for a in actions(env, namespace, "quiet")] == [
            ("scale_down", "replicas 3 -> 2")
        ]
        wait_for(
            lambda: sorted(leaders(env, namespace, "quiet")) == [0, 1],
            what="replica 2 to drain and go",
            timeout=20.0,
        )
        assert replicas(env, namespace, "spiky") == 1 and actions(env, namespace, "spiky") == []


def test_fragmented_replicas_are_recreated_one_at_a_time_and_the_others_untouched(env, namespace):
    with operator(env, namespace):
        inference(env, namespace, "leaky", 4, [FRAGMENTED])
        ready_and_scraped(env, namespace, "leaky", 4)
        before = {i: p["metadata"]["uid"] for i, p in leaders(env, namespace, "leaky").items()}
        # Replica 1 first, by more than a scrape and a cycle, so its window is the first to fill whichever
        # target Prometheus happens to scrape first.
        env.scenario.set(namespace, "leaky", 1, fragmentation=0.5)
        time.sleep(SCRAPE + INTERVAL)
        env.scenario.set(namespace, "leaky", 0, fragmentation=0.3)
        out_of_service: list[int] = []  # at each look, how many replicas were out

        def both_recreated() -> bool:
            now = leaders(env, namespace, "leaky")
            out_of_service.append(sum(1 for i in range(4) if i not in now or not serving(now[i])))
            recreated = {
                i for i in (0, 1) if i in now and now[i]["metadata"]["uid"] != before[i] and serving(now[i])
            }
            return recreated == {0, 1}

        wait_for(both_recreated, 40, "both fragmented replicas to be drained, deleted and recreated")
        assert max(out_of_service) == 1, "maxUnavailable 1: never two replicas out of service at once"
        records = list(reversed(actions(env, namespace, "leaky")))
        assert [(a["action"], a["target"]) for a in records] == [
            ("restart_service", "replica-1"),
            ("restart_service", "replica-0"),
        ]
        assert [a["value"] for a in records] == [pytest.approx(0.5), pytest.approx(0.3)]
        after = leaders(env, namespace, "leaky")
        assert {i: after[i]["metadata"]["uid"] for i in (2, 3)} == {2: before[2], 3: before[3]}
        assert all(serving(after[i]) for i in (2, 3))


def test_prometheus_down_means_no_action_and_metrics_unavailable_until_it_returns(env, namespace):
    with operator(env, namespace):
        inference(env, namespace, "blind", 1, [UP])
        ready_and_scraped(env, namespace, "blind", 1)
        wait_for(
            lambda: condition(env, namespace, "blind", "MetricsAvailable").get("reason") == "Evaluated",
            what="metrics to be available",
            timeout=20.0,
        )
        # High for a moment before the outage: the last samples Prometheus keeps are high ones.
        env.scenario.set(namespace, "blind", utilization=0.95)
        time.sleep(1.5 * SCRAPE)
        env.prometheus.stop()
        try:
            # A cycle may first see too few samples (a loaded machine scrapes late); the outage must then show
            # as PrometheusUnavailable.
            down = wait_for(
                lambda: (
                    condition(env, namespace, "blind", "MetricsAvailable").get("reason")
                    == "PrometheusUnavailable"
                    and condition(env, namespace, "blind", "MetricsAvailable")
                ),
                what="MetricsAvailable=False, PrometheusUnavailable",
                timeout=20.0,
            )
            assert down["status"] == "False"
            assert down["reason"] == "PrometheusUnavailable" and "unreachable" in down["message"]
            time.sleep(WINDOW)
            assert replicas(env, namespace, "blind") == 1 and actions(env, namespace, "blind") == []
            assert len(events(env, namespace, "blind", "PrometheusUnavailable")) == 1
        finally:
            env.prometheus.start()
        back = time.time()
        wait_for(
            lambda: condition(env, namespace, "blind", "MetricsAvailable").get("status") == "True",
            timeout=30,
            what="MetricsAvailable=True after Prometheus returned",
        )
        # The outage is a gap, not a window of the last samples repeated: a fresh full window is needed.
        wait_for(lambda: actions(env, namespace, "blind"), timeout=30, what="the scale-up once data is back")
        assert time.time() - back >= WINDOW


def test_dry_run_records_events_and_status_entries_only(env, namespace):
    env.scenario.set(namespace, "rehearsal", utilization=0.95)
    with operator(env, namespace):
        inference(env, namespace, "rehearsal", 2, [UP, FRAGMENTED], dryRun=True)
        ready_and_scraped(env, namespace, "rehearsal", 2)
        pods = {i: p["metadata"]["uid"] for i, p in leaders(env, namespace, "rehearsal").items()}
        env.scenario.set(namespace, "rehearsal", 0, fragmentation=0.4)
        wait_for(
            lambda: (
                {a["action"] for a in actions(env, namespace, "rehearsal")} >= {"scale_up", "restart_service"}
            ),
            what="dry-run records of both rules",
            timeout=20.0,
        )
        time.sleep(SETTLE)
        records = actions(env, namespace, "rehearsal")
        assert all(a["dryRun"] and a["result"].startswith("would have done: ") for a in records)
        assert len(records) == 2  # the cooldowns pace dry-run records as they would pace actions
        assert replicas(env, namespace, "rehearsal") == 2
        now = leaders(env, namespace, "rehearsal")
        assert {i: p["metadata"]["uid"] for i, p in now.items()} == pods
        assert all(
            serving(p) and names.ANNOTATION_DRAIN_STARTED not in (p["metadata"].get("annotations") or {})
            for p in now.values()
        )
        assert len(events(env, namespace, "rehearsal", "DryRunScaleUp")) == 1
        assert len(events(env, namespace, "rehearsal", "DryRunRuleRestart")) == 1
        assert not events(env, namespace, "rehearsal", "ScaleUp")


def test_an_operator_restarted_mid_window_acts_on_time_and_keeps_its_cooldowns(env, namespace):
    window = 6.0
    env.scenario.set(namespace, "steady", utilization=BASELINE)
    with operator(env, namespace):
        inference(env, namespace, "steady", 1, [rule("npu_utilization", ">", "80%", "scale_up", window)])
        ready_and_scraped(env, namespace, "steady", 1)
        started = time.time()
        env.scenario.set(namespace, "steady", utilization=0.95)
        time.sleep(1.0)
    # Nobody watches for most of the window; then a new process picks up where the old one was.
    time.sleep(3.0)
    with operator(env, namespace):
        restarted = time.time()
        wait_for(lambda: replicas(env, namespace, "steady") == 2, what="the scale-up", timeout=20.0)
        acted = time.time()
    delay = acted - started
    print(
        f"\ncondition -> scale_up across an operator restart: {delay:.2f}s (for {window:g}s, "
        f"{acted - restarted:.2f}s after the restart)"
    )
    assert window <= delay <= window + INTERVAL + SCRAPE + STEP + SLACK
    assert acted - restarted < window - 1, "the new process must not wait for a window of its own"
    with operator(env, namespace):
        # A third process reads the cooldown from status.actions: no second scale-up though the rule holds.
        time.sleep(SETTLE)
        assert replicas(env, namespace, "steady") == 2 and len(actions(env, namespace, "steady")) == 1


def test_a_rule_with_an_unknown_metric_is_an_invalid_spec_and_affects_nothing_else(env, namespace):
    env.scenario.set(namespace, "good", utilization=0.95)
    env.scenario.set(namespace, "bad", utilization=0.95)
    with operator(env, namespace):
        inference(env, namespace, "bad", 1, [FRAGMENTED])
        inference(env, namespace, "good", 1, [UP])
        wait_for(
            lambda: (get(env, namespace, "bad").get("status") or {}).get("readyReplicas") == 1,
            what="the bad object's replica to serve",
            timeout=20.0,
        )
        pod = leaders(env, namespace, "bad")[0]["metadata"]["uid"]
        env.kube.patch(
            names.KIND, namespace, "bad", {"spec": {"rules": [UP, rule("gpu_util", ">", "50%", "notify")]}}
        )

        ready = wait_for(
            lambda: (
                condition(env, namespace, "bad", "Ready").get("reason") == "InvalidSpec"
                and condition(env, namespace, "bad", "Ready")
            ),
            what="Ready=False, InvalidSpec",
            timeout=20.0,
        )
        assert "spec.rules[1].metric: unknown metric 'gpu_util'" in ready["message"]
        assert "npu_utilization" in ready["message"]
        metrics = wait_for(
            lambda: (
                condition(env, namespace, "bad", "MetricsAvailable").get("reason") == "UnknownMetric"
                and condition(env, namespace, "bad", "MetricsAvailable")
            ),
            what="MetricsAvailable=False, UnknownMetric",
            timeout=20.0,
        )
        assert metrics["status"] == "False" and "gpu_util" in metrics["message"]

        wait_for(
            lambda: replicas(env, namespace, "good") == 2, what="the other object's scale-up", timeout=20.0
        )
        time.sleep(SETTLE)
        assert replicas(env, namespace, "bad") == 1 and actions(env, namespace, "bad") == []
        assert leaders(env, namespace, "bad")[0]["metadata"]["uid"] == pod
        assert len(events(env, namespace, "bad", "UnknownMetric")) == 1


def traffic(env: Env, namespace: str, name: str) -> dict[str, int]:
    return {
        t["variant"]: t["weight"]
        for t in (get(env, namespace, name).get("status") or {}).get("traffic") or []
    }


def test_shift_traffic_moves_requests_to_int8_under_load_and_back_once_it_clears(env, namespace):
    """The loop writes the split into the object's annotation; the reconciler shows it in status.traffic."""
    env.scenario.set(namespace, "split", utilization=BASELINE)
    to_int8 = {**rule("npu_utilization", ">", "80%", "shift_traffic"), "to": "int8", "step": 50}
    to_fp16 = {**rule("npu_utilization", "<", "30%", "shift_traffic"), "to": "fp16", "step": 50}
    with operator(env, namespace):
        env.kube.create(
            inference_document("split", "split", "/models/m")
            .namespace(namespace)
            .engine("vllm-ascend")
            .parallelism(tensor=1, pipeline=1, data=2)
            .routing("inferencePool")
            .spec(variants=[{"name": "fp16", "precision": "fp16"}, {"name": "int8", "precision": "int8"}])
            .rules([to_int8, to_fp16])
            .section("autoscaling", shiftCooldown="2s")
            .section("disruption", maxUnavailable=1, drainSeconds=1)
            .build()
        )
        # Routing objects need their CRDs, absent here: the fleet's engines run anyway, and so do its rules.
        ready_and_scraped(env, namespace, "split", 2)
        assert traffic(env, namespace, "split") == {"fp16": 50, "int8": 50}  # even, as the replicas

        env.scenario.set(namespace, "split", utilization=0.95)
        wait_for(
            lambda: traffic(env, namespace, "split") == {"fp16": 0, "int8": 100},
            what="the shift to int8 under load",
            timeout=30.0,
        )
        shifts = [a for a in actions(env, namespace, "split") if a["action"] == "shift_traffic"]
        assert [a["result"] for a in reversed(shifts)] == [
            "traffic fp16 50%, int8 50% -> fp16 0%, int8 100%",
        ]
        assert len(events(env, namespace, "split", "ShiftTraffic")) == 1
        annotation = get(env, namespace, "split")["metadata"]["annotations"][names.ANNOTATION_TRAFFIC]
        assert annotation == '{"fp16":0,"int8":100}'

        env.scenario.set(namespace, "split", utilization=0.1)
        wait_for(
            lambda: traffic(env, namespace, "split") == {"fp16": 100, "int8": 0},
            what="the way back to fp16 once the load clears",
            timeout=30.0,
        )
        times = sorted(a["time"] for a in actions(env, namespace, "split") if a["action"] == "shift_traffic")
        assert len(times) == 3  # one there, two steps of 50 back
        # A replica and a spec were never touched: the split moves requests, not pods.
        assert replicas(env, namespace, "split") == 2
