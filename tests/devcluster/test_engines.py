"""Simulated engine pods: reading pod manifests, and real HTTP servers scraped like Prometheus would."""

from __future__ import annotations

import os
import random
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ascend_fleet_dev.fleet.enginepods import engine_pod
from ascend_fleet_dev.fleet.engines import (
    SimulatedEngines,
    render_metrics,
    with_real_traffic,
)
from ascend_fleet_dev.fleet.prometheus import Target
from ascend_fleet_dev.fleet.scenario import FragmentationModel, Scenario
from ascend_fleet_exporter import metrics as exporter_metrics

NS = "team-a"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PER_DEVICE = [
    "ascend_fleet_npu_utilization_ratio",
    "ascend_fleet_hbm_used_bytes",
    "ascend_fleet_hbm_total_bytes",
    "ascend_fleet_memory_fragmentation_ratio",
    "ascend_fleet_memory_slack_ratio",
    "ascend_fleet_alloc_retries_total",
]


def fake_pod(
    name: str,
    ip: str | None,
    *,
    inference: str = "qwen",
    replica: int = 0,
    rank: int = 0,
    command: list[str] | None = None,
    npus: int = 2,
    uid: str | None = None,
    start_time: str | None = None,
) -> dict:
    """A pod as the operator renders it, reduced to what the simulator reads."""
    status = {
        "phase": "Running",
        **({"podIP": ip} if ip else {}),
        **({"startTime": start_time} if start_time else {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": NS,
            "name": name,
            "uid": uid or f"uid-{name}",
            "labels": {
                "inference.ascendfleet.io/name": inference,
                "inference.ascendfleet.io/replica": str(replica),
                "inference.ascendfleet.io/rank": str(rank),
                "inference.ascendfleet.io/role": "leader" if rank == 0 else "worker",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "command": command or ["vllm", "serve", "/models/qwen", "--served-model-name", "qwen-7b"],
                    "ports": [{"name": "npu-metrics", "containerPort": 9410}],
                    "resources": {"limits": {"huawei.com/Ascend910": str(npus), "memory": "64Gi"}},
                }
            ]
        },
        "status": status,
    }


@pytest.fixture
def loopback_ip():
    """Fresh 127/8 addresses, so parallel runs and other suites never collide on port 9410."""
    prefix = f"127.{100 + os.getpid() % 100}.{random.randrange(256)}"
    return lambda host: f"{prefix}.{host}"


@pytest.fixture
def clock():
    """A clock the test moves by hand, so ages and curves are exact."""

    class Clock:
        now = 1_000_000.0

        def __call__(self) -> float:
            return self.now

    return Clock()


def scrape(address: str) -> dict[str, dict[tuple, float]]:
    """GET /metrics and parse it with the Prometheus client's parser: name -> {labels: value}."""
    with NO_PROXY.open(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    result: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            result.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return result


def refused(address: str) -> bool:
    try:
        NO_PROXY.open(f"http://{address}/health", timeout=2).close()
    except urllib.error.URLError as err:
        return isinstance(err.reason, ConnectionRefusedError)
    return False


def test_engine_pod_reads_identity_devices_port_and_engine():
    pod = fake_pod("qwen-1-1", "127.10.0.5", replica=1, rank=1, npus=8, start_time="2025-01-01T00:00:00Z")
    pod["spec"]["containers"][0]["ports"] = [{"name": "npu-metrics", "containerPort": 9500}]
    engine = engine_pod(pod, now=0.0)
    assert (engine.namespace, engine.name, engine.inference, engine.replica, engine.rank) == (
        NS,
        "qwen-1-1",
        "qwen",
        1,
        1,
    )
    assert (engine.devices, engine.address, engine.leader, engine.model_name) == (
        8,
        "127.10.0.5:9500",
        False,
        "qwen-7b",
    )
    assert engine.started_at == 1735689600.0


@pytest.mark.parametrize(
    ("command", "engine"),
    [
        (["python3", "-m", "sglang.launch_server", "--model-path", "/m"], "sglang"),
        (["python3", "-m", "ascend_fleet_exporter.sglang", "--tp-size", "8"], "sglang"),
        (
            ["/bin/bash", "-c", 'ray start --head --port=6379 && exec "$@"', "bash", "vllm", "serve", "/m"],
            "vllm",
        ),
        (["/bin/bash", "-c", 'exec ray start --address="${LEADER_ADDRESS}:6379" --block'], "vllm"),
    ],
)
def test_engine_is_detected_from_the_command(command, engine):
    assert engine_pod(fake_pod("p", None, command=command), now=0.0).engine == engine


def test_pods_without_the_inference_label_are_not_engines():
    pod = fake_pod("other", None)
    del pod["metadata"]["labels"]["inference.ascendfleet.io/name"]
    assert engine_pod(pod, now=0.0) is None


def test_defaults_without_port_resources_or_ip():
    pod = fake_pod("bare", None)
    pod["spec"]["containers"][0].pop("ports")
    pod["spec"]["containers"][0].pop("resources")
    engine = engine_pod(pod, now=5.0)
    assert (engine.address, engine.devices, engine.started_at) == ("127.0.0.1:9410", 1, 5.0)


def test_exposition_parses_and_has_the_exact_metric_names():
    leader = engine_pod(fake_pod("q", None, command=["python3", "-m", "sglang.launch_server"]), now=0.0)
    text = render_metrics(leader, Scenario.constant(0.5).sample(0, NS, "qwen", 0, 0, 1)).decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert families["sglang:token_usage"].samples[0].labels == {
        "model_name": "qwen",
        "tp_rank": "0",
        "pp_rank": "0",
        "dp_rank": "0",
    }
    names = {sample.name for family in families.values() for sample in family.samples}
    assert set(PER_DEVICE) <= names
    assert names == {
        *exporter_metrics.ALL_METRICS,
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
    }


def test_exporter_values_are_consistent():
    pod = engine_pod(fake_pod("q", None, npus=1), now=0.0)
    sample = Scenario.constant(0.5).sample(0, NS, "qwen", 0, 0, 1)
    values = {
        family.name: family.samples[0].value
        for family in text_string_to_metric_families(render_metrics(pod, sample).decode())
    }
    assert values["ascend_fleet_memory_allocated_bytes"] < values["ascend_fleet_memory_reserved_bytes"]
    assert values["ascend_fleet_memory_slack_ratio"] == pytest.approx(
        1 - values["ascend_fleet_memory_allocated_bytes"] / values["ascend_fleet_memory_reserved_bytes"],
        abs=1e-9,
    )
    assert values["ascend_fleet_memory_fragmentation_ratio"] <= values["ascend_fleet_memory_slack_ratio"]
    # The per-core-type readings and HBM bandwidth of a 910B at half load, each a ratio below the bandwidth.
    for name in (
        exporter_metrics.NPU_AICUBE_UTILIZATION_RATIO,
        exporter_metrics.NPU_AIVECTOR_UTILIZATION_RATIO,
        exporter_metrics.NPU_AICPU_UTILIZATION_RATIO,
    ):
        assert 0 < values[name] < values[exporter_metrics.HBM_BANDWIDTH_UTILIZATION_RATIO] <= 1, name


def test_a_chip_without_cube_or_vector_lines_exports_no_series_for_them():
    pod = engine_pod(fake_pod("q", None, npus=2), now=0.0)
    scenario = Scenario.from_dict({"inferences": {"*": {"demand": 0.5, "chip": "ascend910a"}}})
    text = render_metrics(pod, scenario.sample(0, NS, "qwen", 0, 0, 1)).decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert exporter_metrics.NPU_AICUBE_UTILIZATION_RATIO not in names
    assert exporter_metrics.NPU_AIVECTOR_UTILIZATION_RATIO not in names
    assert {
        exporter_metrics.NPU_AICPU_UTILIZATION_RATIO,
        exporter_metrics.HBM_BANDWIDTH_UTILIZATION_RATIO,
    } <= names


def test_servers_export_the_scenario_per_device_and_queues_on_leaders(loopback_ip, clock):
    scenario = Scenario.constant(1.0, max_running_requests=10)
    with SimulatedEngines(scenario, clock=clock) as engines:
        engines.on_pod_running(fake_pod("qwen-0", loopback_ip(1), replica=0))
        engines.on_pod_running(fake_pod("qwen-0-1", loopback_ip(2), replica=0, rank=1))
        engines.on_pod_running(fake_pod("qwen-1", loopback_ip(3), replica=1))
        assert engines.endpoint(NS, "qwen-0") == f"{loopback_ip(1)}:9410"

        leader = scrape(engines.endpoint(NS, "qwen-0"))
        assert leader["ascend_fleet_npu_utilization_ratio"] == {
            (("device", "0"),): 0.5,
            (("device", "1"),): 0.5,
        }
        assert set(PER_DEVICE) <= set(leader)
        assert leader["vllm:num_requests_running"] == {(("engine", "0"), ("model_name", "qwen-7b")): 5.0}
        assert leader["vllm:num_requests_waiting"] == {(("engine", "0"), ("model_name", "qwen-7b")): 0.0}

        worker = scrape(engines.endpoint(NS, "qwen-0-1"))
        assert worker["ascend_fleet_npu_utilization_ratio"][(("device", "0"),)] == 0.5
        assert not [name for name in worker if name.startswith("vllm:")]

        with NO_PROXY.open(f"http://{engines.endpoint(NS, 'qwen-1')}/health", timeout=5) as response:
            assert response.status == 200


def test_stopping_a_leader_shifts_its_load_and_updates_targets(loopback_ip, clock):
    class Sink:
        targets: list[Target] = []

        def set_targets(self, targets):
            self.targets = list(targets)

    sink = Sink()
    waiting = ("vllm:num_requests_waiting", (("engine", "0"), ("model_name", "qwen-7b")))
    with SimulatedEngines(
        Scenario.constant(2.0, max_running_requests=10), prometheus=sink, clock=clock
    ) as engines:
        first, second = (
            fake_pod("qwen-0", loopback_ip(1), replica=0),
            fake_pod("qwen-1", loopback_ip(2), replica=1),
        )
        engines.on_pod_running(first)
        engines.on_pod_running(second)
        assert sink.targets[1] == Target(
            f"{loopback_ip(2)}:9410",
            {"namespace": NS, "inference": "qwen", "replica": "1", "rank": "0", "pod": "qwen-1"},
        )
        values = scrape(engines.endpoint(NS, "qwen-0"))
        assert values[waiting[0]][waiting[1]] == 0.0

        address = engines.endpoint(NS, "qwen-1")
        engines.on_pod_stopped(second)
        assert refused(address)
        assert [target.labels["pod"] for target in sink.targets] == ["qwen-0"]

        # Two replicas' worth of demand on one replica: busy, and a full replica's worth queued.
        values = scrape(engines.endpoint(NS, "qwen-0"))
        assert values["ascend_fleet_npu_utilization_ratio"][(("device", "0"),)] == 1.0
        assert values[waiting[0]][waiting[1]] == 10.0
    assert sink.targets == []


def test_fragmentation_grows_with_age_and_a_recreated_pod_starts_fresh(loopback_ip, clock):
    scenario = Scenario.constant(1.0, fragmentation=FragmentationModel(start=0.0, per_minute=0.6, max=1.0))
    with SimulatedEngines(scenario, clock=clock) as engines:
        engines.on_pod_running(fake_pod("qwen-0", loopback_ip(1), uid="first"))
        clock.now += 10
        engines.on_pod_running(fake_pod("qwen-0", loopback_ip(1), uid="first"))  # a replayed watch event
        assert engines.sample(NS, "qwen-0").fragmentation == pytest.approx(0.1)

        engines.on_pod_stopped(fake_pod("qwen-0", loopback_ip(1), uid="first"))
        engines.on_pod_running(fake_pod("qwen-0", loopback_ip(1), uid="second"))
        engines.on_pod_stopped(
            fake_pod("qwen-0", loopback_ip(1), uid="first")
        )  # late, must not stop "second"
        values = scrape(engines.endpoint(NS, "qwen-0"))
        assert values["ascend_fleet_memory_fragmentation_ratio"][(("device", "0"),)] == 0.0


def test_overrides_show_up_in_the_next_scrape(loopback_ip, clock):
    scenario = Scenario.constant(1.0)
    with SimulatedEngines(scenario, clock=clock) as engines:
        engines.on_pod_running(fake_pod("qwen-0", loopback_ip(1), replica=0))
        engines.on_pod_running(fake_pod("qwen-1", loopback_ip(2), replica=1))
        scenario.set(NS, "qwen", replica=1, utilization=0.95, fragmentation=0.2, queue=7)
        values = scrape(engines.endpoint(NS, "qwen-1"))
        assert values["ascend_fleet_npu_utilization_ratio"][(("device", "1"),)] == 0.95
        assert values["ascend_fleet_memory_fragmentation_ratio"][(("device", "1"),)] == 0.2
        assert values["vllm:num_requests_waiting"] == {(("engine", "0"), ("model_name", "qwen-7b")): 7.0}
        assert (
            scrape(engines.endpoint(NS, "qwen-0"))["ascend_fleet_npu_utilization_ratio"][(("device", "0"),)]
            == 0.5
        )


def test_taken_or_foreign_addresses_fall_back_to_a_free_local_port(loopback_ip, clock):
    with socket.socket() as squatter, SimulatedEngines(Scenario.constant(1.0), clock=clock) as engines:
        squatter.bind((loopback_ip(1), 9410))
        squatter.listen()
        engines.on_pod_running(fake_pod("taken", loopback_ip(1)))
        engines.on_pod_running(fake_pod("foreign", "10.1.2.3", replica=1))
        for name in ("taken", "foreign"):
            host, port = engines.endpoint(NS, name).split(":")
            assert host == "127.0.0.1"
            assert int(port) != 9410
            assert "ascend_fleet_npu_utilization_ratio" in scrape(engines.endpoint(NS, name))


def test_close_stops_every_server(loopback_ip, clock):
    engines = SimulatedEngines(Scenario.constant(1.0), clock=clock)
    engines.on_pod_running(fake_pod("qwen-0", loopback_ip(1)))
    address = engines.endpoint(NS, "qwen-0")
    engines.close()
    engines.close()
    assert refused(address)
    engines.on_pod_running(fake_pod("qwen-1", loopback_ip(2)))
    assert engines.pods() == []


class _BusyEngine:
    """Stands in for a serving engine that real requests keep fully busy."""

    def serving_real_traffic(self) -> bool:
        return True

    def snapshot(self) -> tuple[int, int, float, float]:
        return 8, 2, 0.7, 1.0


def test_real_traffic_drives_the_core_types_and_bandwidth_unless_the_scenario_keeps_utilization():
    sample = Scenario.constant(0.2).sample(0, NS, "qwen", 0, 0, 1)
    served = with_real_traffic(sample, _BusyEngine())
    assert served.utilization == 1.0 and served.cores.hbm_bandwidth > sample.cores.hbm_bandwidth
    assert served.cores.aicube > sample.cores.aicube
    kept = with_real_traffic(sample, _BusyEngine(), utilization=False)
    assert (kept.utilization, kept.cores, kept.requests_running) == (sample.utilization, sample.cores, 8)
