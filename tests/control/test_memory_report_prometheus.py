"""``memory-report`` against a real Prometheus scraping simulated engines of the demo scenario."""

from __future__ import annotations

import csv
import time

import pytest

from ascend_fleet.cli.main import main
from ascend_fleet.kube import scaled
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.prometheus import PrometheusServer
from ascend_fleet_dev.fleet.scenario import Scenario

from .helpers import NAME, NS
from .test_prometheus_queries import engine_pod

pytestmark = pytest.mark.prometheus
RUN_SECONDS = 16.0


def test_the_report_reads_the_demo_runs_history_into_rows_and_a_heatmap(
    prometheus_binary, tmp_path, monkeypatch
):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no kubeconfig: actions are not read
    with (
        PrometheusServer(binary=prometheus_binary, startup_timeout=scaled(30.0)) as prometheus,
        SimulatedEngines(Scenario.demo(), prometheus=prometheus) as engines,
    ):
        engines.on_pod_running(engine_pod(0, "127.0.4.1"))
        engines.on_pod_running(engine_pod(1, "127.0.4.2"))
        prometheus.wait_for_targets(2)
        time.sleep(RUN_SECONDS)
        report, picture = tmp_path / "report.csv", tmp_path / "heatmap.png"
        argv = ["memory-report", NAME, "-n", NS, "--since", "20s", "--step", "2s"]
        argv += ["--prometheus-url", prometheus.url, "-o", str(report), "-o", str(picture)]
        assert main(argv) == 0
    rows = list(csv.DictReader(report.open(encoding="utf-8")))
    by_replica = {replica: [row for row in rows if row["replica"] == replica] for replica in ("0", "1")}
    assert all(len(replica_rows) >= 5 for replica_rows in by_replica.values())
    assert all(row["namespace"] == NS and row["inference"] == NAME for row in rows)
    assert all(float(row["hbm_reserved_bytes"]) > 0 for row in rows)
    assert all(0 <= float(row["largest_free_block_bytes"]) < float(row["hbm_reserved_bytes"]) for row in rows)
    leaking = [float(row["fragmentation"]) for row in by_replica["1"]]
    steady = [float(row["fragmentation"]) for row in by_replica["0"]]
    assert leaking[-1] > leaking[0] + 0.03
    assert leaking[-1] - leaking[0] > steady[-1] - steady[0]
    from matplotlib.image import imread

    height, width = imread(picture).shape[:2]
    assert (width, height) == (1200, 250)
