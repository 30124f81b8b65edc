"""The dashboard's four panels and its cost figure, evaluated by a real Prometheus scraping simulated engines.

Two fleets: an Atlas A2 (ascend910b) vLLM fleet that serves a few real requests, and a 910A SGLang fleet,
whose npu-smi prints no AI Cube or AI Vector line. The panels' own PromQL (read from the chart's JSON, with
the Grafana variables set to "all") must show every reading of the A2 fleet, show the 910A fleet's missing
core types as absent (no series, not 0), and give tokens per NPU-hour for the fleet that generated tokens.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time

import aiohttp
import pytest

from ascend_fleet.kube import scaled, wait_for
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.prometheus import PrometheusServer
from ascend_fleet_dev.fleet.scenario import Scenario
from tests.chart.helm import CHART
from tests.chart.promql import grafana_to_promql
from tests.devcluster.helpers import leader_pod

pytestmark = pytest.mark.prometheus
NS = "panels"
DASHBOARD = json.loads((CHART / "files" / "dashboards" / "ascend-fleet.json").read_text())
# The A2 fleet runs at half load; the 910A fleet idles a little.
SCENARIO = {
    "noise": 0,
    "inferences": {
        f"{NS}/a2": {"demand": 1.0, "chip": "ascend910b"},
        f"{NS}/old": {"demand": 0.2, "chip": "ascend910a"},
    },
}
NPUS = {"a2": 4, "old": 2}


def engine_pod(inference: str, replica: int, ip: str, command: list[str]) -> dict:
    name = f"{inference}-{replica}"
    return leader_pod(NS, name, ip, command, inference=inference, replica=replica, npus=NPUS[inference])


def targets(title: str) -> dict[str, str]:
    """The panel's queries by legend suffix, as Prometheus receives them with every fleet selected."""
    panel = next(p for p in DASHBOARD["panels"] if p["title"] == title)
    return {t["legendFormat"].split("}} ", 1)[1]: grafana_to_promql(t["expr"]) for t in panel["targets"]}


def by_fleet(series: list[dict]) -> dict[str, float]:
    return {item["metric"]["inference"]: float(item["value"][1]) for item in series}


@pytest.fixture(scope="module")
def fleets(prometheus_binary):
    prefix = f"127.{100 + os.getpid() % 100}.{random.randrange(256)}"
    with (
        PrometheusServer(binary=prometheus_binary, startup_timeout=scaled(30.0)) as prometheus,
        SimulatedEngines(Scenario.from_dict(SCENARIO), prometheus=prometheus) as engines,
    ):
        vllm = ["vllm", "serve", "/models/q", "--served-model-name", "q", "--port", "8000"]
        for replica in (0, 1):
            engines.on_pod_running(engine_pod("a2", replica, f"{prefix}.{1 + replica}", vllm))
        engines.on_pod_running(engine_pod("old", 0, f"{prefix}.3", ["python3", "-m", "sglang.launch_server"]))
        prometheus.wait_for_targets(3)
        yield prometheus, engines


def generate_tokens(url: str, requests: int = 6) -> None:
    async def send() -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(requests):
                body = {"model": "q", "prompt": "one two three", "max_tokens": 8}
                async with session.post(url + "/v1/completions", json=body) as response:
                    assert response.status == 200, await response.text()

    asyncio.run(asyncio.wait_for(send(), 60))


def answer(prometheus: PrometheusServer, promql: str, fleets: int) -> dict[str, float]:
    def enough() -> dict[str, float] | None:
        values = by_fleet(prometheus.query(promql))
        return values if len(values) >= fleets else None

    return wait_for(enough, scaled(20.0), f"{promql} for {fleets} fleet(s)", interval=0.25)


def test_core_types_show_what_each_chip_reports_and_nothing_it_does_not(fleets):
    prometheus, _ = fleets
    queries = targets("NPU utilization per core type")
    core = answer(prometheus, queries["AI Core"], 2)
    assert core == {"a2": pytest.approx(0.5), "old": pytest.approx(0.2)}
    assert answer(prometheus, queries["AI CPU"], 2).keys() == {"a2", "old"}
    for absent_on_910a in ("AI Cube", "AI Vector"):
        values = answer(prometheus, queries[absent_on_910a], 1)
        # The A2 fleet reports a value below its AI Core figure; the 910A fleet has no series at all.
        assert values.keys() == {"a2"} and 0 < values["a2"] < core["a2"], absent_on_910a


def test_hbm_bandwidth_saturation_queue_depth_and_fragmentation_have_values(fleets):
    prometheus, _ = fleets
    [bandwidth] = targets("HBM bandwidth saturation per replica").values()
    saturation = prometheus.query(bandwidth)
    assert {(s["metric"]["inference"], s["metric"]["replica"]) for s in saturation} == {
        ("a2", "0"),
        ("a2", "1"),
        ("old", "0"),
    }
    assert all(0 < float(s["value"][1]) <= 1 for s in saturation)
    queue = targets("Request queue depth")
    assert answer(prometheus, queue["(vLLM)"], 1) == {"a2": 0.0}
    assert answer(prometheus, queue["(SGLang)"], 1) == {"old": 0.0}
    [fragmentation] = targets("Memory fragmentation index per replica").values()
    assert answer(prometheus, fragmentation, 2).keys() == {"a2", "old"}


def test_tokens_per_npu_hour_is_generated_tokens_over_the_fleets_npus(fleets):
    prometheus, engines = fleets
    tokens = targets("Tokens per NPU-hour per fleet")
    generate_tokens(f"http://{engines.api_endpoint(NS, 'a2-0')}")
    generated = 'sum by (inference) (vllm:generation_tokens_total{namespace="panels"})'
    wait_for(
        lambda: by_fleet(prometheus.query(generated)) == {"a2": 48.0},
        scaled(20.0),
        "6 requests x 8 tokens scraped",
        interval=0.25,
    )
    at = time.time()
    per_npu_hour = by_fleet(prometheus.query(tokens["(vLLM)"], at=at))
    fleet_per_hour = by_fleet(
        prometheus.query(
            'sum by (inference) (rate(vllm:generation_tokens_total{namespace="panels"}[5m])) * 3600', at=at
        )
    )
    # The fleet's hourly rate shared by its 8 NPUs (2 replicas x 4); the 910A SGLang fleet served nothing.
    assert per_npu_hour.keys() == {"a2"} and per_npu_hour["a2"] > 0
    assert per_npu_hour["a2"] == pytest.approx(fleet_per_hour["a2"] / 8)
    npus = answer(prometheus, 'count by (inference) (ascend_fleet_hbm_total_bytes{namespace="panels"})', 2)
    assert npus == {"a2": 8.0, "old": 2.0}
    # SGLang's fleet generated nothing: a rate of 0 where its counter exists, never a made-up figure.
    assert all(value == 0 for value in by_fleet(prometheus.query(tokens["(SGLang)"], at=at)).values())
