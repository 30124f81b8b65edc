"""A real Prometheus scraping simulated engines through file_sd; stopped and started like a real one."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import ascend_fleet
from ascend_fleet.kube import scaled, wait_for
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.prometheus import (
    ENGINES_JOB,
    PrometheusError,
    PrometheusNotFound,
    PrometheusServer,
    PrometheusUnavailable,
    Target,
    file_sd_groups,
    find_prometheus_binary,
    render_config,
    write_atomically,
)
from ascend_fleet_dev.fleet.scenario import Scenario
from tests.devcluster.helpers import leader_pod

NS = "team-a"


@pytest.fixture
def prometheus(prometheus_binary):
    with PrometheusServer(binary=prometheus_binary, startup_timeout=scaled(30.0)) as server:
        yield server


def engine_pod(name: str, ip: str, replica: int) -> dict:
    """A single-pod replica leader as the operator renders it, reduced to what the simulator reads."""
    return leader_pod(NS, name, ip, ["vllm", "serve", "/models/qwen"], replica=replica, npus=1)


def wait_for_series(prometheus: PrometheusServer, promql: str, count: int, timeout: float = 15.0) -> list:
    """The result of ``promql`` once it has ``count`` series."""

    def answer() -> list | None:
        result = prometheus.query(promql)
        return result if len(result) == count else None

    return wait_for(answer, timeout, f"{promql} to have {count} series", interval=0.2)


def by_replica(series: list[dict]) -> dict[str, float]:
    return {item["metric"]["replica"]: float(item["value"][1]) for item in series}


def test_missing_binary_says_how_to_install_it(tmp_path):
    with pytest.raises(PrometheusNotFound, match="apt-get install prometheus"):
        find_prometheus_binary({"PATH": str(tmp_path)})
    with pytest.raises(PrometheusNotFound, match="ASCEND_FLEET_PROMETHEUS=.*not an executable"):
        find_prometheus_binary({"ASCEND_FLEET_PROMETHEUS": str(tmp_path / "prometheus"), "PATH": ""})


def test_binary_from_the_environment_wins(tmp_path):
    binary = tmp_path / "prometheus"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert find_prometheus_binary({"ASCEND_FLEET_PROMETHEUS": str(binary), "PATH": ""}) == str(binary)


def test_config_has_the_engines_job_over_file_sd_and_extras():
    config = render_config(
        Path("/run/targets.json"),
        scrape_interval="2s",
        rule_files=[Path("/run/rules.yaml")],
        extra_scrape_configs=[{"job_name": "self", "static_configs": [{"targets": ["127.0.0.1:9090"]}]}],
    )
    assert config["global"] == {"scrape_interval": "2s", "evaluation_interval": "1s"}
    assert config["scrape_configs"][0] == {
        "job_name": ENGINES_JOB,
        "file_sd_configs": [{"files": ["/run/targets.json"], "refresh_interval": "1s"}],
    }
    assert config["scrape_configs"][1]["job_name"] == "self"
    assert config["rule_files"] == ["/run/rules.yaml"]


def test_targets_file_is_replaced_whole(tmp_path):
    path = tmp_path / "engines.json"
    write_atomically(path, json.dumps(file_sd_groups([Target("127.10.0.5:9410", {"replica": "0"})])))
    assert json.loads(path.read_text()) == [{"targets": ["127.10.0.5:9410"], "labels": {"replica": "0"}}]
    assert [p.name for p in tmp_path.iterdir()] == ["engines.json"]


@pytest.mark.prometheus
def test_prometheus_scrapes_simulated_engines_and_survives_a_restart(prometheus):
    prefix = f"127.{100 + os.getpid() % 100}.{random.randrange(256)}"
    scenario = Scenario.constant(1.0)
    scenario.set(NS, "qwen", replica=1, fragmentation=0.2)
    with SimulatedEngines(scenario, prometheus=prometheus) as engines:
        engines.on_pod_running(engine_pod("qwen-0", f"{prefix}.1", replica=0))
        engines.on_pod_running(engine_pod("qwen-1", f"{prefix}.2", replica=1))
        prometheus.wait_for_targets(2)

        series = wait_for_series(prometheus, "ascend_fleet_npu_utilization_ratio", 2)
        assert {
            key: series[0]["metric"][key] for key in ("namespace", "inference", "rank", "device", "job")
        } == {
            "namespace": NS,
            "inference": "qwen",
            "rank": "0",
            "device": "0",
            "job": ENGINES_JOB,
        }
        assert by_replica(series) == {"0": 0.5, "1": 0.5}
        pods = {item["metric"]["pod"] for item in series}
        assert pods == {"qwen-0", "qwen-1"}

        fragmentation = prometheus.query(
            "max by (namespace, inference, replica) (ascend_fleet_memory_fragmentation_ratio)"
        )
        assert by_replica(fragmentation)["1"] == 0.2
        # A subquery needs a sample at or before its first aligned step, so it may take a second.
        held = by_replica(
            wait_for_series(prometheus, "min_over_time(ascend_fleet_npu_utilization_ratio[5s:1s])", 2)
        )
        assert held == {"0": 0.5, "1": 0.5}

        url, pid = prometheus.url, prometheus.pid
        prometheus.stop()
        assert not Path(f"/proc/{pid}").exists()
        with pytest.raises(PrometheusUnavailable, match="not reachable"):
            prometheus.query("up")

        # While Prometheus is down a replica goes away; the restarted server must pick that up.
        engines.on_pod_stopped(engine_pod("qwen-1", f"{prefix}.2", replica=1))
        prometheus.start()
        assert prometheus.url == url
        prometheus.wait_for_targets(1)
        # Replica 0 now carries all the demand. (Replica 1's last samples may stay visible for the
        # 5 min lookback: a Prometheus that was down when a target vanished wrote no staleness marker.)
        wait_for(
            lambda: by_replica(prometheus.query("ascend_fleet_npu_utilization_ratio")).get("0") == 1.0,
            timeout=15.0,
            interval=0.2,
        )
        # Samples from before the restart were kept in the same data directory.
        before = prometheus.query("count_over_time(ascend_fleet_npu_utilization_ratio{replica='1'}[5m])")
        assert float(before[0]["value"][1]) >= 1


@pytest.mark.prometheus
def test_a_bad_query_is_an_error_not_an_outage(prometheus):
    with pytest.raises(PrometheusError, match="parse error") as caught:
        prometheus.query("min_over_time(up[5s:")
    assert not isinstance(caught.value, PrometheusUnavailable)
    assert prometheus.query("vector(1)")[0]["value"][1] == "1"
    assert prometheus.query("scalar(vector(2))")[0]["value"][1] == "2"


@pytest.mark.prometheus
def test_a_config_prometheus_rejects_fails_start_with_its_log(prometheus_binary):
    server = PrometheusServer(
        binary=prometheus_binary, extra_scrape_configs=[{"job_name": "broken", "bogus": 1}]
    )
    try:
        with pytest.raises(PrometheusError, match="exited during startup(.|\n)*bogus"):
            server.start()
        assert server.pid is None
    finally:
        server.close()


@pytest.mark.prometheus
def test_close_leaves_no_process_and_no_directory(prometheus_binary):
    with PrometheusServer(binary=prometheus_binary) as server:
        pid, directory = server.pid, server.directory
        assert Path(f"/proc/{pid}").exists()
    assert not Path(f"/proc/{pid}").exists()
    assert not directory.exists()
    server.close()


@pytest.mark.prometheus
def test_a_forgotten_server_ends_with_the_interpreter(prometheus_binary):
    script = (
        "from ascend_fleet_dev.fleet.prometheus import PrometheusServer\n"
        f"server = PrometheusServer(binary={prometheus_binary!r}).start()\n"
        "print(server.pid, server.directory)\n"
    )
    # The child must import this checkout's package whether or not it is installed.
    paths = [str(Path(ascend_fleet.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True, env=env
    )
    pid, directory = result.stdout.split()
    assert not Path(f"/proc/{pid}").exists()
    assert not Path(directory).exists()


def test_each_target_group_has_a_file_of_its_own_and_the_job_reads_them_all(tmp_path):
    server = PrometheusServer(binary="/bin/true", directory=tmp_path)
    server.set_targets([Target("127.10.0.5:9410", {"pod": "sim"})])
    server.set_targets([Target("127.10.0.6:9410", {"pod": "real"})], group="real-engines")
    server.set_targets([], group="engines")  # the simulated engines emptying theirs leaves the real ones
    targets = tmp_path / "targets"
    assert json.loads((targets / "engines.json").read_text()) == []
    assert json.loads((targets / "real-engines.json").read_text()) == [
        {"targets": ["127.10.0.6:9410"], "labels": {"pod": "real"}}
    ]
    (job,) = server.config["scrape_configs"]
    assert job["file_sd_configs"][0]["files"] == [str(targets / "*.json")]
    with pytest.raises(ValueError, match="lower-case word .* not '../x'"):
        server.set_targets([], group="../x")
    server.close()
