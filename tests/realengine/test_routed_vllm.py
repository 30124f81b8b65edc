"""The routed path in front of real engines: a vllm-ascend fleet of two real ``vllm serve`` pods behind the
operator's InferencePool, the upstream endpoint picker and Envoy, on the real control plane, scraped by a real
Prometheus.

``kubectl apply`` of the AscendInference; the operator renders the pool, the picker's Deployment and the engine
pods; the real scheduler binds them; the node agent runs each engine pod as a real ``vllm serve`` of the tiny
model (:class:`~ascend_fleet_dev.real.realengines.RealEngines`) and the picker pod as the upstream
picker behind an Envoy (:class:`~ascend_fleet_dev.real.localpods.LocalPods`). The picker reads vLLM's
own ``vllm:`` gauges from each pod; which engine answered is read from the engines' own counters, never from
the picker. Skipped without the control plane, the picker, Prometheus or ``make engine-vllm``; under
``CI=true`` that fails.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ascend_fleet.kube import Kube, wait_for
from ascend_fleet.render.picker_config import SATURATION_QUEUE_DEPTH
from ascend_fleet_dev.fleet.prometheus import PrometheusServer
from ascend_fleet_dev.real.localpods import LocalPods, is_picker_pod
from ascend_fleet_dev.real.realcluster import RealCluster
from ascend_fleet_dev.real.realengines import RealEngines
from ascend_fleet_dev.real.tinymodel import BYTE_TOKEN_IDS
from ascend_fleet_exporter import metrics
from tests.e2e.fleet import Fleet
from tests.support.documents import inference

from .server import http, process_group_rss_bytes
from .support import routed_vllm_stack

pytestmark = pytest.mark.timeout(1500)
NAMESPACE = "default"
NAME = "tiny"
MODEL = "tiny-llm"
IMAGE = "registry.example.com/ai/vllm-ascend:v0.23.0.post1-fleet1"  # this project's image: the exporter is on
SLOTS = 2  # --max-num-seqs: a small batch, so a handful of requests fills an engine
# Requests kept in flight on the saturated engine: SLOTS running and more than the picker's threshold waiting,
# with room for the moment between a request's end and its successor's arrival.
FLOOD = SLOTS + SATURATION_QUEUE_DEPTH + 4
# The flood's work is in the prefill: long prompts of token ids (no tokenizing) and a few output tokens, so the
# engine stays busy while its API server, which handles every output token, has little to do. Long generations
# instead starve the API server on two shared cores, and the engine runs empty (docs/real-cluster.md).
FLOOD_PROMPT_TOKENS = 3000  # within the tiny model's 4096 positions
FLOOD_TOKENS = 16
ROUTED = 20  # sequential requests through the picker while one engine is saturated
ROUTED_TOKENS = 4
RETRIES = 4  # sends of one routed request at most
# vllm:request_params_max_tokens has buckets 1, 2, 5, 10, ...: routed requests (4) fall at or under 5, the
# flood's (16) never do, so each engine's own histogram counts the routed requests it answered.
SHORT_BUCKET = "5.0"
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"


def samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


@dataclass
class Engine:
    """One engine pod: its name and vLLM's own address (the pod's IP and ``--port``)."""

    pod: str
    url: str

    def series(self) -> list:
        status, text = http("GET", f"{self.url}/metrics", timeout=20)
        assert status == 200, text
        return samples(text)

    def gauge(self, name: str) -> float:
        return sum(s.value for s in self.series() if s.name == name)

    def short_answered(self) -> float:
        """Requests with at most 5 max_tokens this engine finished, from its own histogram."""
        return sum(
            s.value
            for s in self.series()
            if s.name == "vllm:request_params_max_tokens_bucket" and s.labels.get("le") == SHORT_BUCKET
        )

    def succeeded(self) -> float:
        """Requests this engine answered in full (vLLM counts aborted and failed ones under the same name)."""
        return sum(
            s.value
            for s in self.series()
            if s.name == "vllm:request_success_total"
            and s.labels.get("finished_reason") in ("stop", "length")
        )


@dataclass
class RoutedFleet:
    kube: Kube
    engines: RealEngines
    pickers: LocalPods
    prometheus: PrometheusServer
    fleet: Fleet
    ready_seconds: float

    def engine_pods(self) -> list[dict]:
        return [p for p in self.fleet.pods(NAME) if not is_picker_pod(p)]

    def real(self) -> list[Engine]:
        found = []
        for pod in self.engine_pods():
            engine = self.engines.engine(NAMESPACE, pod["metadata"]["name"])
            assert engine is not None, f"pod {pod['metadata']['name']} has no real engine"
            found.append(Engine(pod["metadata"]["name"], engine.url))
        return found

    def entry(self) -> str:
        route = self.pickers.route(NAMESPACE, NAME)
        assert route is not None, f"no picker serves pool {NAME}: {self.pickers.failures}"
        return route.url


def document() -> str:
    """The fleet as a user writes it: two data-parallel replicas of one NPU each, routed by an InferencePool
    with one picker replica (two cost a second picker and gateway on a 2-core machine and add nothing here)."""
    doc = (
        inference(NAME, MODEL)
        .engine("vllm-ascend", image=IMAGE)
        .parallelism(data=2)
        .section("batching", maxBatchSize=SLOTS)
        .routing("inferencePool", picker={"replicas": 1})
        .build()
    )
    doc["metadata"]["namespace"] = NAMESPACE
    return yaml.safe_dump(doc)


def kubectl_apply(cluster: RealCluster, text: str) -> None:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig_path), "apply", "-f", "-"],
        input=text, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def routed(prometheus_binary) -> Iterator[RoutedFleet]:  # the binary: a skip (CI: a failure) without one
    with routed_vllm_stack(NAMESPACE, prometheus=True) as (local, pickers):
        assert local.real_engines is not None and local.prometheus is not None
        fleet = Fleet(local.kube, NAMESPACE)
        started = time.monotonic()
        assert isinstance(local.cluster, RealCluster)
        kubectl_apply(local.cluster, document())
        fleet.wait_ready(NAME, 2, timeout=600)  # both engines start at once: 40 s to 4 min each
        ready = time.monotonic() - started
        wait_for(lambda: pickers.route(NAMESPACE, NAME), 120, "the picker's route")
        yield RoutedFleet(local.kube, local.real_engines, pickers, local.prometheus, fleet, ready)


def completion(prompt: str | list[int], tokens: int) -> dict:
    # ignore_eos: random weights may draw the end token at any step; the length is what the test decides.
    return {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True, "temperature": 0}


def unique_prompt() -> str:
    # Distinct prompts: identical ones would (rightly) draw the picker's prefix-cache affinity to one engine.
    return f"{uuid.uuid4().hex} tell me about fleets"


def unique_token_prompt() -> list[int]:
    # Random token ids: no two flood prompts share a prefix block, so none is served from the prefix cache.
    return [random.choice(BYTE_TOKEN_IDS) for _ in range(FLOOD_PROMPT_TOKENS)]


def test_both_engine_pods_are_real_vllm_serves_and_ready(routed):
    engines = routed.real()
    assert len(engines) == 2 and len({e.url for e in engines}) == 2, engines
    for engine in engines:
        status, text = http("GET", f"{engine.url}/version")
        assert status == 200 and json.loads(text)["version"].startswith("0.32.0"), text
    pids = [routed.engines.engine(NAMESPACE, e.pod).process.pid for e in engines]
    memory = [process_group_rss_bytes(pid) for pid in pids if pid is not None]
    print(f"\nmeasured: both engine pods Ready {routed.ready_seconds:.0f} s after kubectl apply; "
          f"memory per engine {[f'{m / 2**30:.2f} GiB' for m in memory]}")  # fmt: skip
    assert len(memory) == 2 and all(m > 0 for m in memory), memory


def test_completions_and_chat_through_the_pool_are_answered_by_vllm(routed):
    engines = routed.real()
    before = sum(e.succeeded() for e in engines)
    url = routed.entry()

    def answered() -> tuple[int, str] | None:
        status, text = http("POST", f"{url}/v1/completions", completion(unique_prompt(), 3), timeout=60)
        return (status, text) if status == 200 else None

    # The picker answers once it has listed the pool's endpoints and scraped them (a second or two).
    status, text = wait_for(answered, 120, "a completion through the picker", interval=1.0)
    body = json.loads(text)
    assert body["model"] == MODEL and body["object"] == "text_completion", body
    messages = [{"role": "user", "content": "What is a fleet?"}]
    status, text = http(
        "POST",
        f"{url}/v1/chat/completions",
        {"model": MODEL, "messages": messages, "max_tokens": 4},
        timeout=60,
    )
    assert status == 200, text
    assert json.loads(text)["choices"][0]["message"]["role"] == "assistant"
    # Each answer through the gateway is a request one of the real engines counted as its own success.
    after = sum(e.succeeded() for e in engines)
    assert after - before >= 2, (before, after)


class Gauges(threading.Thread):
    """Samples one engine's running and waiting gauges (its own /metrics) every 0.1 s until stopped; a read
    that ends after the stop is dropped."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(name=f"gauges {engine.pod}", daemon=True)
        self.engine, self.halt = engine, threading.Event()
        self.seen: list[tuple[float, float]] = []

    def run(self) -> None:
        while True:  # a sample before the first routed request and after each tenth of a second until stopped
            try:
                series = self.engine.series()
            except (AssertionError, OSError):
                series = []
            gauge = {s.name: s.value for s in series if s.name in (RUNNING, WAITING)}
            # A read that ends after the halt may have seen the flood cancelled (the halt comes first), so it
            # does not count; one that ended before the halt read the engine while the flood still ran.
            if self.halt.is_set():
                return
            if len(gauge) == 2:
                self.seen.append((gauge[RUNNING], gauge[WAITING]))
            if self.halt.wait(0.1):
                return


async def keep_busy(url: str, client: aiohttp.ClientSession, finished: list[tuple[str, float]]) -> None:
    """Long prompts straight to one engine, each sent as the last ends, until cancelled (vLLM then
    aborts the one in flight). Each that ends is recorded as (status or error, seconds); one whose
    connection broke is sent again like any other, so a dropped connection does not shrink the flood. A flood
    request has no time limit: queued behind the others on a loaded machine it may wait longer than any
    client timeout, and one that gave up would end its keeper."""
    forever = aiohttp.ClientTimeout(total=None)
    while True:
        sent, body = time.monotonic(), completion(unique_token_prompt(), FLOOD_TOKENS)
        try:
            async with client.post(f"{url}/v1/completions", json=body, timeout=forever) as answer:
                await answer.read()
                status = str(answer.status)
        except (aiohttp.ClientError, TimeoutError) as error:
            status = f"{type(error).__name__}: {error}"[:120]
        finished.append((status, time.monotonic() - sent))


async def routed_request(client: aiohttp.ClientSession, entry: str, refused: list[int]) -> int:
    """One short completion through the pool's entry, sent again (as a client would) while the picker refuses
    it: on a machine so loaded that both engines' gauges go stale (the picker's scrapes time out), the picker
    holds requests and sheds those that wait past their time to live. A refused request reached no engine."""
    for _ in range(RETRIES):
        body = completion(unique_prompt(), ROUTED_TOKENS)
        async with client.post(f"{entry}/v1/completions", json=body) as answer:
            await answer.read()
        if answer.status not in (429, 503):
            break
        refused.append(answer.status)
    return answer.status


def saturate_and_route(
    routed: RoutedFleet, busy: Engine
) -> tuple[list[int], Gauges, list[tuple[str, float]], list[int]]:
    """Keep ``busy`` saturated, then send ``ROUTED`` requests one by one through the picker: their statuses,
    the busy engine's gauges meanwhile, the flood requests that ended (status, seconds), and the refusals."""
    gauges, entry = Gauges(busy), routed.entry()
    finished: list[tuple[str, float]] = []
    refused: list[int] = []

    def saturated() -> bool:
        return busy.gauge(WAITING) >= SATURATION_QUEUE_DEPTH

    async def scenario() -> list[int]:
        timeout = aiohttp.ClientTimeout(total=600)
        # The flood opens a connection per request: a kept-alive one the server closed while it idled in the
        # pool would fail the next request sent on it at once, and the flood would thin out.
        async with (
            aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as client,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True)) as flood,
        ):
            keepers = [asyncio.create_task(keep_busy(busy.url, flood, finished)) for _ in range(FLOOD)]
            try:
                await asyncio.to_thread(wait_for, saturated, 120, f"{busy.pod} saturated", 0.5)
                await asyncio.sleep(1.0)  # the picker scrapes every 50 ms: it has seen the queue by now
                gauges.start()
                # The first sample is taken before any routed request is sent.
                await asyncio.to_thread(wait_for, lambda: gauges.seen, 60, f"{busy.pod}'s gauges", 0.1)
                statuses = []
                for _ in range(ROUTED):
                    statuses.append(await routed_request(client, entry, refused))
                # And one sample read after the last routed request, so the samples span the routed ones.
                taken = len(gauges.seen)
                await asyncio.to_thread(wait_for, lambda: len(gauges.seen) > taken, 60, "a last sample", 0.1)
                return statuses
            finally:
                gauges.halt.set()
                for keeper in keepers:
                    keeper.cancel()
                await asyncio.gather(*keepers, return_exceptions=True)

    statuses = asyncio.run(scenario())
    if gauges.is_alive():
        gauges.join(10)
    return statuses, gauges, finished, refused


@pytest.mark.parametrize("saturated", [0, 1])
def test_the_picker_sends_new_requests_away_from_a_saturated_engine(routed, saturated):
    """One engine is kept full straight at its pod address (running, and more than the picker's threshold
    waiting); of ``ROUTED`` requests through the pool's entry, the other engine answers all but at most two.

    Chosen at random, two or fewer of 20 land on the saturated engine with probability 211 / 2**20 (0.02 %);
    saturating each engine in turn shows the picker reaches both, so a pool that held one engine alone fails.
    """
    engines = routed.real()
    busy, free = engines[saturated], engines[1 - saturated]
    server = routed.engines.engine(NAMESPACE, busy.pod)
    assert server is not None
    before = {e.pod: e.short_answered() for e in (busy, free)}
    statuses, gauges, flood, refused = saturate_and_route(routed, busy)
    if any(status != "200" for status, _ in flood):  # what the engine said while the flood broke
        now = routed.engines.engine(NAMESPACE, busy.pod)
        print(f"\n{busy.pod}'s server (pid {server.process.pid}, now {now.process.pid if now else None}):\n"
              f"{server.process.log_tail(3000)}")  # fmt: skip
    after = {e.pod: e.short_answered() for e in (busy, free)}
    got = {pod: int(after[pod] - before[pod]) for pod in before}
    running = [r for r, _ in gauges.seen]
    waiting = [w for _, w in gauges.seen]
    print(f"\nmeasured: routed requests while {busy.pod} was saturated: {got}; its gauges over "
          f"{len(gauges.seen)} samples: running {min(running, default=0):.0f}-{max(running, default=0):.0f}, "
          f"waiting {min(waiting, default=0):.0f}-{max(waiting, default=0):.0f} "
          f"(median {statistics.median(waiting) if waiting else 0:.0f}); flood requests ended {len(flood)} ({dict(Counter(st for st, _ in flood))}, {min((t for _, t in flood), default=0):.0f} to {max((t for _, t in flood), default=0):.0f} s); refused by the picker and sent again {len(refused)}")  # fmt: skip
    assert statuses == [200] * ROUTED, statuses
    # The saturation was real, in the engine's own gauges, throughout the routed requests: the engine ran
    # requests in every sample and held more than the picker's threshold it could not start yet. A long prefill
    # may take the step's whole token budget, so it runs 1 or 2 (SLOTS) at a time.
    assert len(gauges.seen) >= 2, gauges.seen
    assert min(running) >= 1 and max(running) <= SLOTS, gauges.seen
    assert statistics.median(waiting) >= SATURATION_QUEUE_DEPTH, gauges.seen
    # Every routed request is counted by exactly one engine, from the engines' own histograms.
    assert sum(got.values()) == ROUTED, got
    assert got[free.pod] >= ROUTED - 2 and got[busy.pod] <= 2, got


def test_prometheus_scrapes_both_engine_pods(routed):
    """The real Prometheus finds the real engines' pods (file_sd from the node agent) and holds vLLM's series
    and the exporter's info series for each."""
    pods = {p["metadata"]["name"] for p in routed.engine_pods()}

    def by_pod(query: str) -> set[str] | None:
        found = {r["metric"].get("pod") for r in routed.prometheus.query(query)}
        return found if found == pods else None

    info = f'{metrics.EXPORTER_INFO}{{backend="{metrics.BACKEND_NONE}"}}'
    assert wait_for(lambda: by_pod(f"{info} == 1"), 60, "the exporter's info series of both pods")
    assert wait_for(lambda: by_pod("vllm:num_requests_running"), 60, "vLLM's series of both pods")
    served = routed.prometheus.query(f'sum by (pod) (vllm:request_success_total{{namespace="{NAMESPACE}"}})')
    assert {r["metric"]["pod"] for r in served} == pods, served
    labels = routed.prometheus.query(info)[0]["metric"]
    assert (labels["namespace"], labels["inference"]) == (NAMESPACE, NAME), labels
