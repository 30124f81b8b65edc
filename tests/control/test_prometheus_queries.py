"""The control loop's queries against a real Prometheus scraping simulated engines (no Kubernetes)."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import start_http_server

from ascend_fleet.api.catalog import PRESETS, Catalog
from ascend_fleet.api.v1alpha1 import Rule
from ascend_fleet.control.evaluate import EvaluationSettings
from ascend_fleet.control.prometheus import Prometheus
from ascend_fleet.control.queries import Observations, Query, QueryWindow, rule_queries
from ascend_fleet.kube import scaled, wait_for
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.prometheus import PrometheusServer
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.local.ports import free_port

from .helpers import NAME, NS

pytestmark = pytest.mark.prometheus
STEP = 1.0
POLICY = EvaluationSettings(step=STEP, interval=1.0)


def engine_pod(replica: int, ip: str, engine: str = "vllm") -> dict:
    command = (
        ["python", "-m", "sglang.launch_server"] if engine == "sglang" else ["vllm", "serve", "/models/q"]
    )
    return {
        "metadata": {
            "namespace": NS,
            "name": f"{NAME}-{replica}",
            "uid": f"uid-{replica}",
            "labels": {
                "inference.ascendfleet.io/name": NAME,
                "inference.ascendfleet.io/replica": str(replica),
                "inference.ascendfleet.io/rank": "0",
                "inference.ascendfleet.io/role": "leader",
            },
        },
        "spec": {
            "containers": [
                {"name": "engine", "command": command, "resources": {"limits": {"huawei.com/Ascend910": "2"}}}
            ]
        },
        "status": {"podIP": ip, "phase": "Running"},
    }


def observe(prometheus: PrometheusServer, queries: list[Query], timeout: float = 5.0) -> Observations:
    return asyncio.run(Prometheus(prometheus.url, timeout).observe(queries, STEP, time.time()))


@pytest.fixture(scope="module")
def prometheus(prometheus_binary):
    with PrometheusServer(binary=prometheus_binary, startup_timeout=scaled(30.0)) as server:
        yield server


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return Scenario.constant(0.5)


@pytest.fixture(scope="module")
def engines(prometheus, scenario):
    with SimulatedEngines(scenario, prometheus=prometheus) as served:
        served.on_pod_running(engine_pod(0, "127.0.3.1"))
        served.on_pod_running(engine_pod(1, "127.0.3.2", engine="sglang"))
        prometheus.wait_for_targets(2)
        yield served


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_catalog_entry_is_promql_prometheus_accepts(prometheus, preset):
    catalog = Catalog.build(preset)
    queries = [
        Query(QueryWindow(expression, 5, scope), stat)
        for expression in catalog.promql().values()
        for scope in ("fleet", "replica")
        for stat in ("min", "max", "count")
    ]
    observations = observe(prometheus, queries)
    assert not observations.failures
    assert set(observations.series) == set(queries)


def test_engine_queue_metrics_of_both_engines_map_to_replicas(engines, scenario, prometheus):
    scenario.set(NS, NAME, queue=7)
    queue = Rule(metric="queue_depth", threshold=5, for_="1s", action="notify", scope="replica")
    extreme, _ = rule_queries(queue, POLICY.catalog, STEP)

    def both_replicas():
        series = observe(prometheus, [extreme]).series[extreme]
        return series if series.get((NS, NAME, 0)) == 7 and series.get((NS, NAME, 1)) == 7 else None

    wait_for(both_replicas, what="vLLM's and SGLang's queue depth per replica", timeout=20.0, interval=0.25)
    scenario.clear(NS, NAME)


def test_simulated_engines_feed_the_core_type_and_bandwidth_entries_per_replica(
    engines, scenario, prometheus
):
    catalog = Catalog.build()
    queries = {
        name: Query(QueryWindow(catalog.expression(name), 1, "replica"), "max")
        for name in (
            "aicube_utilization",
            "aivector_utilization",
            "aicpu_utilization",
            "hbm_bandwidth_saturation",
        )
    }

    def both_replicas():
        series = observe(prometheus, list(queries.values())).series
        return series if all(len(series[query]) == 2 for query in queries.values()) else None

    series = wait_for(both_replicas, what="core-type and bandwidth series of both replicas", timeout=20.0)
    # Without noise every replica's sample is the same: what the scenario says reaches Prometheus unchanged.
    cores = scenario.sample(time.time(), NS, NAME, 0, 0, ready_replicas=2).cores
    for replica in (0, 1):
        key = (NS, NAME, replica)
        assert series[queries["hbm_bandwidth_saturation"]][key] == pytest.approx(cores.hbm_bandwidth)
        assert series[queries["aicube_utilization"]][key] == pytest.approx(cores.aicube)
        assert series[queries["aivector_utilization"]][key] == pytest.approx(cores.aivector)
        assert series[queries["aicpu_utilization"]][key] == pytest.approx(cores.aicpu)
        # The bandwidth leads; cube, vector and AI CPU follow at lower shares of the load.
        assert cores.aicpu < cores.aivector < cores.aicube < cores.hbm_bandwidth


def test_a_bad_raw_query_fails_alone_and_a_stopped_prometheus_is_unavailable(prometheus_binary, tmp_path):
    with PrometheusServer(binary=prometheus_binary, directory=tmp_path) as server:
        good = Query(QueryWindow("up", 2, "fleet"), "count")
        bad = Query(QueryWindow("sum(", 2, "fleet"), "count")
        observations = observe(server, [good, bad])
        assert good not in observations.failures
        assert observations.failures[bad].reason == "QueryFailed"
        assert "parse error" in observations.failures[bad].message
        server.stop()
        down = observe(server, [good], timeout=2)
        assert down.failures[good].reason == "PrometheusUnavailable"
        assert "unreachable" in down.failures[good].message


def test_npu_exporter_preset_joins_chips_to_replicas_through_pod_labels(prometheus_binary, tmp_path):
    registry = CollectorRegistry()
    chip = Gauge("npu_chip_info_utilization", "AICore %", ["id", "namespace", "pod_name"], registry=registry)
    total = Gauge("npu_chip_info_hbm_total_memory", "MB", ["id", "namespace", "pod_name"], registry=registry)
    used = Gauge("npu_chip_info_hbm_used_memory", "MB", ["id", "namespace", "pod_name"], registry=registry)
    labels = ["id", "namespace", "pod_name"]
    cube = Gauge("npu_chip_info_cube_utilization", "AI Cube %", labels, registry=registry)
    bandwidth = Gauge("npu_chip_info_hbm_bandwidth_utilization", "HBM bandwidth %", labels, registry=registry)
    pod_labels = Gauge(
        "kube_pod_labels",
        "pod labels",
        [
            "namespace",
            "pod",
            "uid",
            "label_inference_ascendfleet_io_name",
            "label_inference_ascendfleet_io_replica",
        ],
        registry=registry,
    )
    for chip_id, pod, percent in (
        ("0", "qwen-0", 90),
        ("1", "qwen-0", 70),
        ("2", "qwen-1", 20),
        ("3", "idle", 99),
    ):
        chip.labels(chip_id, NS, pod).set(percent)
        total.labels(chip_id, NS, pod).set(65536)
        used.labels(chip_id, NS, pod).set(32768)
        bandwidth.labels(chip_id, NS, pod).set(percent - 10)
        if pod != "qwen-1":  # replica 1's chips report no cube (an older driver): no value, not zero
            cube.labels(chip_id, NS, pod).set(percent / 2)
    for replica in (0, 1):
        pod_labels.labels(NS, f"qwen-{replica}", f"u{replica}", NAME, str(replica)).set(1)
    port = free_port()
    server_thread, _ = _serve(registry, port)
    job = {
        "job_name": "npu-exporter-and-ksm",
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }
    catalog = Catalog.build("npu-exporter")
    utilization = Query(QueryWindow(catalog.expression("npu_utilization"), 1, "replica"), "max")
    hbm = Query(QueryWindow(catalog.expression("hbm_usage"), 1, "replica"), "max")
    cube_q = Query(QueryWindow(catalog.expression("aicube_utilization"), 1, "replica"), "max")
    bandwidth_q = Query(QueryWindow(catalog.expression("hbm_bandwidth_saturation"), 1, "replica"), "max")
    with PrometheusServer(binary=prometheus_binary, directory=tmp_path, extra_scrape_configs=[job]) as server:

        def joined():
            observations = observe(server, [utilization, hbm, cube_q, bandwidth_q])
            return observations if len(observations.series[utilization]) == 2 else None

        observations = wait_for(
            joined, what="npu-exporter series joined to replicas", timeout=20.0, interval=0.25
        )
    assert observations.series[utilization] == {
        (NS, NAME, 0): pytest.approx(0.8),
        (NS, NAME, 1): pytest.approx(0.2),
    }
    assert observations.series[hbm] == {(NS, NAME, 0): pytest.approx(0.5), (NS, NAME, 1): pytest.approx(0.5)}
    assert observations.series[cube_q] == {(NS, NAME, 0): pytest.approx(0.4)}
    # Bandwidth saturation is the replica's worst chip: 90 - 10 on qwen-0, 20 - 10 on qwen-1.
    assert observations.series[bandwidth_q] == {
        (NS, NAME, 0): pytest.approx(0.8),
        (NS, NAME, 1): pytest.approx(0.1),
    }
    server_thread.shutdown()


def _serve(registry: CollectorRegistry, port: int):
    return start_http_server(port, addr="127.0.0.1", registry=registry)


def test_sglang_queue_totals_are_not_summed_with_their_per_priority_series(prometheus_binary, tmp_path):
    """Newer SGLang writes each queue gauge with priority="" (the total) and again per priority value."""
    import http.server
    import threading

    series = []
    for name, total, parts in (("sglang:num_queue_reqs", 7, (3, 4)), ("sglang:num_running_reqs", 5, (1, 4))):
        series.append(f"# TYPE {name} gauge")
        for priority, value in (("", total), *((str(i), v) for i, v in enumerate(parts))):
            series.append(
                f'{name}{{namespace="{NS}",inference="{NAME}",replica="0",priority="{priority}"}} {value}'
            )
    body = ("\n".join(series) + "\n").encode()

    class Exposition(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server hook's name
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    port = free_port()
    server_http = http.server.ThreadingHTTPServer(("127.0.0.1", port), Exposition)
    threading.Thread(target=server_http.serve_forever, daemon=True).start()
    job = {
        "job_name": "sglang-with-priorities",
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }
    catalog = Catalog.build()
    depth = Query(QueryWindow(catalog.expression("queue_depth"), 1, "replica"), "max")
    busy = Query(QueryWindow(catalog.expression("running_requests"), 1, "replica"), "max")
    summed = Query(
        QueryWindow("sum by (namespace, inference, replica) (sglang:num_queue_reqs)", 1, "replica"), "max"
    )
    try:
        with PrometheusServer(
            binary=prometheus_binary, directory=tmp_path, extra_scrape_configs=[job]
        ) as server:
            observations = wait_for(
                lambda: (o := observe(server, [depth, busy, summed])).series.get(depth) and o,
                what="SGLang's queue gauges scraped",
                timeout=20.0,
                interval=0.25,
            )
    finally:
        server_http.shutdown()
    assert observations.series[summed] == {(NS, NAME, 0): 14}, "the exposition must carry the double count"
    assert observations.series[depth] == {(NS, NAME, 0): 7}
    assert observations.series[busy] == {(NS, NAME, 0): 5}
