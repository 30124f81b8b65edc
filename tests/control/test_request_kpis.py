"""The request KPIs of the catalog (ttft_p99, tpot_p99, queue_time_p99, slow_request_share), read by a real Prometheus
from a simulated engine that served real requests, against what the client measured."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request

import aiohttp
import pytest

from ascend_fleet.api.catalog import Catalog
from ascend_fleet.kube import scaled
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.prometheus import PrometheusServer
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.fleet.serving import dialect_of

from .helpers import NAME, NS

pytestmark = pytest.mark.prometheus
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def leader(ip: str, command: list[str]) -> dict:
    return {
        "metadata": {"namespace": NS, "name": f"{NAME}-0", "uid": "uid-kpi", "labels": {
            "inference.ascendfleet.io/name": NAME, "inference.ascendfleet.io/replica": "0",
            "inference.ascendfleet.io/rank": "0", "inference.ascendfleet.io/role": "leader"}},
        "spec": {"containers": [{"name": "engine", "command": command,
                                 "resources": {"limits": {"huawei.com/Ascend910": "8"}}}]},
        "status": {"podIP": ip, "phase": "Running"},
    }  # fmt: skip


def query(prometheus: PrometheusServer, expression: str) -> dict[str, float]:
    url = f"{prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with NO_PROXY.open(url, timeout=10) as response:
        result = json.load(response)["data"]["result"]
    return {item["metric"].get("replica", ""): float(item["value"][1]) for item in result}


def bucket(value: float, bounds) -> tuple[float, float]:
    """The histogram bucket (lower, upper] holding ``value``."""
    lower = 0.0
    for upper in bounds:
        if value <= upper:
            return lower, upper
        lower = upper
    return lower, float("inf")


async def load(url: str, count: int, tokens: int) -> list[tuple[float, float]]:
    """``count`` concurrent streamed requests; (seconds to first token, seconds in all) each."""

    async def one(session):
        start = time.monotonic()
        first = None
        body = {"prompt": "hello world", "max_tokens": tokens, "stream": True}
        async with session.post(url + "/v1/completions", json=body) as response:
            async for line in response.content:
                if first is None and line.startswith(b"data: "):
                    first = time.monotonic() - start
        return first, time.monotonic() - start

    async with aiohttp.ClientSession() as session:
        return await asyncio.gather(*(one(session) for _ in range(count)))


def test_request_kpis_follow_the_requests_the_engine_served(prometheus_binary):
    catalog = Catalog.build()
    # One batch slot: six requests of ~0.65 s each queue behind each other, 1 fast and 5 over a second.
    command = [
        "vllm",
        "serve",
        "/models/q",
        "--served-model-name",
        "q",
        "--port",
        "8000",
        "--max-num-seqs",
        "1",
    ]
    with (
        PrometheusServer(binary=prometheus_binary, startup_timeout=scaled(30.0)) as prometheus,
        SimulatedEngines(Scenario.constant(0.0), prometheus=prometheus) as engines,
    ):
        engines.on_pod_running(leader("127.0.7.1", command))
        prometheus.wait_for_targets(1)
        url = f"http://{engines.api_endpoint(NS, f'{NAME}-0')}"
        measured = asyncio.run(load(url, 6, 29))
        # Prometheus needs two scrapes after the requests to see the increase (1 s scrape interval).
        time.sleep(3)
        values = {name: query(prometheus, catalog.expression(name)) for name in
                  ("slow_request_share", "ttft_p99", "tpot_p99", "queue_time_p99")}  # fmt: skip
    slow = sum(total > 1.0 for _, total in measured) / len(measured)
    assert 0 < slow < 1
    assert values["slow_request_share"]["0"] == pytest.approx(slow, abs=0.01)
    # A quantile from buckets lies in the bucket of the true value (99 % of 6 requests: the slowest).
    worst_ttft = max(first for first, _ in measured)
    low, high = bucket(worst_ttft, dialect_of("vllm").ttft_buckets)
    assert low <= values["ttft_p99"]["0"] <= high
    # The last request waited for the five before it; the client saw that wait within its first token.
    worst_queue = worst_ttft - 0.05
    low, high = bucket(worst_queue, dialect_of("vllm").queue_buckets)
    assert low * 0.9 <= values["queue_time_p99"]["0"] <= high
    # Time per output token after the first, each request's mean (vLLM's histogram): the slowest request's
    # tokens after the first, as the client saw them stream, fall in the bucket the quantile reads.
    worst_tpot = max((total - first) / (29 - 1) for first, total in measured)
    low, high = bucket(worst_tpot, dialect_of("vllm").tpot_buckets)
    assert low * 0.9 <= values["tpot_p99"]["0"] <= high * 1.1, (worst_tpot, values["tpot_p99"])
