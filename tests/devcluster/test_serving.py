"""Simulated engines that serve: real HTTP requests to the OpenAI API of a running simulated engine.

Timing checks compare ratios between two measurements of the same run (the batch curve's shape), with
a tolerance, never absolute wall-clock times: a shared 2-core machine delays every event loop alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ascend_fleet.simulate.curve import BatchCurve
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.fleet.serving import ShortRequestFirst, engine_config
from tests.devcluster.helpers import leader_pod

NS = "serve"
VLLM_SERVE = ["vllm", "serve", "/models/qwen", "--served-model-name", "qwen-7b", "--port", "8000"]
SGLANG_SERVE = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/qwen", "--served-model-name",
                "qwen-7b", "--port", "8000"]  # fmt: skip


def engine_pod(name: str, ip: str, command: list[str]) -> dict:
    """A leader pod as the operator renders it, reduced to what the simulator reads."""
    return leader_pod(NS, name, ip, command)


@pytest.fixture
def serve():
    """Start simulated engines for pods with the given command lines; returns their API base URLs."""
    prefix = f"127.{100 + os.getpid() % 100}.{random.randrange(256)}"
    engines = SimulatedEngines(Scenario.constant(0.0))
    count = iter(range(1, 250))

    def start(command: list[str]) -> str:
        index = next(count)
        name = f"qwen-{index}"
        engines.on_pod_running(engine_pod(name, f"{prefix}.{index}", command))
        address = engines.api_endpoint(NS, name)
        assert address, "a leader with --port serves the OpenAI API"
        return f"http://{address}"

    start.engines = engines
    yield start
    engines.close()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 120))


def words(n: int) -> str:
    return " ".join(["word"] * n)


async def complete(session, url, *, prompt=16, max_tokens=4, priority=None, chat=False, stream=False):
    """One request; returns (status, json body or the parsed SSE events, seconds to first token, seconds total)."""
    body: dict = {"model": "qwen-7b", "max_tokens": max_tokens, "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": words(prompt)}]
    else:
        body["prompt"] = words(prompt)
    if priority is not None:
        body["priority"] = priority
    if stream:
        body["stream_options"] = {"include_usage": True}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    start = time.monotonic()
    first = None
    async with session.post(url + path, json=body) as response:
        if not stream or response.status != 200:
            data = await response.json()
            return response.status, data, None, time.monotonic() - start
        events = []
        async for line in response.content:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if first is None:
                first = time.monotonic() - start
            payload = line[len(b"data: ") :]
            events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
        return response.status, events, first, time.monotonic() - start


def metrics(text: str) -> dict[str, dict[tuple, float]]:
    result: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            result.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return result


async def scrape(session, url) -> dict[str, dict[tuple, float]]:
    async with session.get(url + "/metrics") as response:
        return metrics(await response.text())


def one(series: dict[tuple, float]) -> float:
    assert len(series) == 1, series
    return next(iter(series.values()))


# Reading the command line ---------------------------------------------------------------------


def test_engine_config_reads_each_engines_spelling():
    vllm = engine_config(
        [
            *VLLM_SERVE,
            "--max-num-seqs",
            "8",
            "--scheduling-policy=priority",
            "--additional-config",
            '{"scheduler_config": {"short_request_first_config": {"enabled": true, "threshold": 300, '
            '"long_max_wait_ms": 1500}}}',
        ],  # fmt: skip
        engine="vllm",
        default_model="x",
    )
    assert (vllm.model_name, vllm.port, vllm.max_running, vllm.max_queued) == ("qwen-7b", 8000, 8, None)
    assert vllm.priority_scheduling and vllm.low_priority_first
    assert vllm.short_first == ShortRequestFirst(300, 1.5)
    sglang = engine_config(
        [
            *SGLANG_SERVE,
            "--max-running-requests",
            "4",
            "--max-queued-requests",
            "2",
            "--enable-priority-scheduling",
        ],
        engine="sglang",
        default_model="x",
    )
    assert (sglang.max_running, sglang.max_queued, sglang.priority_scheduling) == (4, 2, True)
    # SGLang serves higher values first unless told otherwise; vLLM lower first.
    assert not sglang.low_priority_first and sglang.preference(5) < sglang.preference(1)
    # vLLM has no queue limit: a flag of SGLang's in a vLLM argv changes nothing.
    assert (
        engine_config(
            [*VLLM_SERVE, "--max-queued-requests", "2"], engine="vllm", default_model="x"
        ).max_queued
        is None
    )


# The API --------------------------------------------------------------------------------------


def test_models_health_and_completions_streamed_and_not(serve):
    url = serve(VLLM_SERVE)

    async def scenario():
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/health") as response:
                assert response.status == 200
            async with session.get(url + "/v1/models") as response:
                models = await response.json()
            assert [m["id"] for m in models["data"]] == ["qwen-7b"]

            status, body, _, _ = await complete(session, url, prompt=12, max_tokens=5)
            assert status == 200 and body["object"] == "text_completion"
            assert len(body["choices"][0]["text"].split()) == 5
            assert body["usage"] == {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}

            status, body, _, _ = await complete(session, url, prompt=7, max_tokens=3, chat=True)
            assert status == 200 and body["choices"][0]["message"]["role"] == "assistant"
            assert body["usage"]["prompt_tokens"] == 7

            status, events, first, total = await complete(session, url, max_tokens=20, chat=True, stream=True)
            assert status == 200 and events[-1] == "[DONE]"
            chunks = [e for e in events[:-1] if e["choices"]]
            assert chunks[0]["object"] == "chat.completion.chunk"
            assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
            text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
            assert len(text.split()) == 20 and chunks[-1]["choices"][0]["finish_reason"] == "length"
            assert events[-2]["usage"]["completion_tokens"] == 20
            # The first token comes well before the last: the answer is streamed as it decodes.
            assert first < total / 2

            status, events, _, _ = await complete(session, url, max_tokens=6, stream=True)
            assert "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"]).split() == [
                "the", "fleet", "serves", "tokens", "on", "ascend"]  # fmt: skip

            async with session.post(
                url + "/v1/completions", json={"model": "other", "prompt": "x"}
            ) as response:
                assert response.status == 404
                assert "does not exist" in (await response.json())["error"]["message"]
            async with session.post(url + "/v1/completions", data=b"not json") as response:
                assert response.status == 400

            scraped = await scrape(session, url)
            assert one(scraped["vllm:time_to_first_token_seconds_count"]) == 4
            assert one(scraped["vllm:e2e_request_latency_seconds_count"]) == 4
            assert one(scraped["vllm:generation_tokens_total"]) == 5 + 3 + 20 + 6
            assert one(scraped["vllm:prompt_tokens_total"]) == 12 + 7 + 16 + 16

    run(scenario())


def test_gauges_follow_real_requests_on_both_ports(serve):
    url = serve([*VLLM_SERVE, "--max-num-seqs", "3"])
    engines = serve.engines
    metrics_address = engines.endpoint(NS, "qwen-1")

    async def scenario():
        async with aiohttp.ClientSession() as session:
            load = [asyncio.create_task(complete(session, url, max_tokens=2000)) for _ in range(5)]
            for _ in range(200):
                await asyncio.sleep(0.02)
                scraped = await scrape(session, f"http://{metrics_address}")
                if one(scraped["vllm:num_requests_waiting"]) == 2:
                    break
            # The scenario's demand is 0: these figures can only come from the requests in flight.
            assert one(scraped["vllm:num_requests_running"]) == 3
            assert 0 < one(scraped["vllm:kv_cache_usage_perc"]) < 1
            assert all(value > 0 for value in scraped["ascend_fleet_npu_utilization_ratio"].values())
            api = await scrape(session, url)
            assert one(api["vllm:num_requests_running"]) == 3
            assert "ascend_fleet_npu_utilization_ratio" not in api  # the exporter's port only
            for task in load:
                task.cancel()
            await asyncio.gather(*load, return_exceptions=True)
            # A client that goes away frees its slot.
            for _ in range(200):
                await asyncio.sleep(0.02)
                if one((await scrape(session, url))["vllm:num_requests_running"]) == 0:
                    break
            assert one((await scrape(session, url))["vllm:num_requests_running"]) == 0

    run(scenario())


# Timing follows the batch curve ----------------------------------------------------------------


def test_first_token_latency_follows_the_curve(serve):
    """A probe's TTFT with 3 others running (batch 4) against 63 others (batch 64): 45 ms vs 210 ms."""
    url = serve([*VLLM_SERVE, "--max-num-seqs", "128"])
    curve = BatchCurve()
    prompt = 4096  # 8x the curve's reference prompt: TTFTs of 0.36 s and 1.68 s, far above loop jitter

    async def probe_at(session, running: int) -> float:
        background = [asyncio.create_task(complete(session, url, prompt=1, max_tokens=100_000))
                      for _ in range(running)]  # fmt: skip
        await asyncio.sleep(0.3)
        _, _, first, _ = await complete(session, url, prompt=prompt, max_tokens=2, stream=True)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await asyncio.sleep(0.1)
        return first

    async def scenario():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            return await probe_at(session, 3), await probe_at(session, 63)

    small, large = run(scenario())
    expected = curve.first_token(64) / curve.first_token(4)
    assert large / small == pytest.approx(expected, rel=0.25), (small, large)


def test_decode_throughput_follows_the_curve(serve):
    """Tokens per second of 4 against 64 concurrent requests: 180 vs 2100 tokens/s."""
    url = serve([*VLLM_SERVE, "--max-num-seqs", "128"])
    curve = BatchCurve()

    async def throughput(session, batch: int, tokens: int) -> float:
        start = time.monotonic()
        results = await asyncio.gather(
            *(complete(session, url, prompt=1, max_tokens=tokens) for _ in range(batch))
        )
        assert all(status == 200 for status, *_ in results)
        return batch * tokens / (time.monotonic() - start)

    async def scenario():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            return await throughput(session, 4, 90), await throughput(session, 64, 90)

    small, large = run(scenario())
    expected = curve.throughput(64) / curve.throughput(4)
    assert large / small == pytest.approx(expected, rel=0.25), (small, large)


# Scheduling -----------------------------------------------------------------------------------


async def finishing_order(url: str, requests: list[dict]) -> list[int]:
    """Occupy the single batch slot, queue ``requests`` in order, return the order they finish in."""
    order: list[int] = []
    async with aiohttp.ClientSession() as session:
        blocker = asyncio.create_task(complete(session, url, max_tokens=25))
        await asyncio.sleep(0.1)

        async def one_request(index: int, request: dict) -> None:
            status, *_ = await complete(session, url, max_tokens=1, **request)
            assert status == 200
            order.append(index)

        tasks = []
        for index, request in enumerate(requests):
            tasks.append(asyncio.create_task(one_request(index, request)))
            await asyncio.sleep(0.03)  # arrival order is the index
        await asyncio.gather(blocker, *tasks)
    return order


def test_priority_orders_the_queue_as_each_engine_does(serve):
    priorities = [{"priority": 5}, {"priority": 1}, {"priority": 3}]
    fcfs = serve([*VLLM_SERVE, "--max-num-seqs", "1"])
    vllm = serve([*VLLM_SERVE, "--max-num-seqs", "1", "--scheduling-policy", "priority"])
    sglang = serve([*SGLANG_SERVE, "--max-running-requests", "1", "--enable-priority-scheduling"])
    sglang_low = serve([*SGLANG_SERVE, "--max-running-requests", "1", "--enable-priority-scheduling",
                        "--schedule-low-priority-values-first"])  # fmt: skip

    async def scenario():
        return await asyncio.gather(
            *(finishing_order(url, priorities) for url in (fcfs, vllm, sglang, sglang_low))
        )

    orders = run(scenario())
    assert orders[0] == [0, 1, 2]  # first come, first served: priority ignored
    assert orders[1] == [1, 2, 0]  # vLLM: lower values first
    assert orders[2] == [0, 2, 1]  # SGLang: higher values first by default
    assert orders[3] == [1, 2, 0]


def test_short_request_first_from_additional_config(serve):
    config = ('{"scheduler_config": {"short_request_first_config": {"enabled": true, "threshold": 256, '
              '"long_max_wait_ms": 60000}}}')  # fmt: skip
    plain = serve([*VLLM_SERVE, "--max-num-seqs", "1"])
    short_first = serve([*VLLM_SERVE, "--max-num-seqs", "1", "--additional-config", config])
    lengths = [{"prompt": 1000}, {"prompt": 2000}, {"prompt": 10}]

    async def scenario():
        return await asyncio.gather(finishing_order(plain, lengths), finishing_order(short_first, lengths))

    plain_order, short_order = run(scenario())
    assert plain_order == [0, 1, 2]
    assert short_order == [2, 0, 1]


def test_short_request_first_ages_long_requests_in(serve):
    config = ('{"scheduler_config": {"short_request_first_config": {"enabled": true, "threshold": 256, '
              '"long_max_wait_ms": 50}}}')  # fmt: skip
    url = serve([*VLLM_SERVE, "--max-num-seqs", "1", "--additional-config", config])
    # The long prompt has waited past 50 ms when the slot frees: it goes before the later short one.
    order = run(finishing_order(url, [{"prompt": 1000}, {"prompt": 10}]))
    assert order == [0, 1]


def test_queue_limit_answers_503_as_sglang_does(serve):
    plain = serve([*SGLANG_SERVE, "--max-running-requests", "1", "--max-queued-requests", "2"])
    by_priority = serve([*SGLANG_SERVE, "--max-running-requests", "1", "--max-queued-requests", "2",
                         "--enable-priority-scheduling"])  # fmt: skip
    unbounded = serve([*VLLM_SERVE, "--max-num-seqs", "1"])

    async def fill(session, url, priorities):
        blocker = asyncio.create_task(complete(session, url, max_tokens=20))
        await asyncio.sleep(0.1)
        tasks = []
        for priority in priorities:
            tasks.append(asyncio.create_task(complete(session, url, max_tokens=1, priority=priority)))
            await asyncio.sleep(0.03)
        return [status for status, *_ in await asyncio.gather(*tasks)], await blocker, tasks

    async def scenario():
        async with aiohttp.ClientSession() as session:
            plain_statuses, *_ = await fill(session, plain, [0, 0, 0])
            async with session.get(plain + "/metrics") as response:
                aborted = one(metrics(await response.text())["sglang:num_aborted_requests_total"])
            priority_statuses, *_ = await fill(session, by_priority, [1, 2, 5])
            vllm_statuses, *_ = await fill(session, unbounded, [0, 0, 0, 0, 0])
            status, body, _, _ = await complete(session, plain, max_tokens=1)
            return plain_statuses, aborted, priority_statuses, vllm_statuses

    plain_statuses, aborted, priority_statuses, vllm_statuses = run(scenario())
    assert plain_statuses == [200, 200, 503] and aborted == 1
    # A strictly preferred newcomer (5 > 1 by SGLang's default) evicts the least preferred waiting one.
    assert priority_statuses == [503, 200, 200]
    assert vllm_statuses == [200] * 5


def test_the_endpoint_pickers_pods_run_no_engine():
    from ascend_fleet_dev.fleet.enginepods import engine_pod as read_pod

    pod = engine_pod("llm-epp-abc", "127.0.0.9", ["/epp", "--pool-name", "llm"])
    assert read_pod(pod, now=0.0) is not None
    pod["metadata"]["labels"]["app.kubernetes.io/component"] = "endpoint-picker"
    assert read_pod(pod, now=0.0) is None


@pytest.mark.parametrize("npu_for_real", [False, True])
def test_a_pod_a_real_engine_serves_gets_only_the_scenarios_npu_series_or_nothing(npu_for_real):
    """``ascend-fleet dev --real --engines vllm``: vLLM serves the pod's API and queue gauges; the simulated
    engines add the scenario's NPU series on a port of their own, and never a second API or queue gauges."""
    pod = engine_pod("qwen-real", f"127.{100 + os.getpid() % 100}.{random.randrange(256)}.9", VLLM_SERVE)
    with SimulatedEngines(
        Scenario.constant(0.9), served_elsewhere=lambda p: True, npu_for_real=npu_for_real
    ) as engines:
        engines.on_pod_running(pod)
        assert engines.api_endpoint(NS, "qwen-real") is None
        address = engines.endpoint(NS, "qwen-real")
        if not npu_for_real:
            assert address is None and engines.targets() == []
            return
        assert address is not None and address.startswith(
            "127.0.0.1:"
        )  # not the pod's IP: vLLM's relay has it
        assert [t.labels["pod"] for t in engines.targets()] == ["qwen-real"]

        async def scrape() -> str:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://{address}/metrics") as response,
            ):
                return await response.text()

        names = {s.name for f in text_string_to_metric_families(run(scrape())) for s in f.samples}
        assert "ascend_fleet_npu_utilization_ratio" in names
        assert not [n for n in names if n.startswith("vllm:")]
        engines.on_pod_stopped(pod)
        assert engines.targets() == []


def test_a_deleted_pods_engine_finishes_its_requests_and_refuses_new_ones():
    """Graceful deletion, as a kubelet's SIGTERM gives vLLM's server: the streamed answer in flight completes,
    a request that arrives meanwhile gets 503, and the pod's stop waits for the first; a pod that stops
    without being deleted (it failed, its node died) cuts its request off."""
    prefix = f"127.{100 + os.getpid() % 100}.{random.randrange(256)}"
    engines = SimulatedEngines(Scenario.constant(0.0))
    try:
        deleted, failed = (
            engine_pod(name, f"{prefix}.{i}", VLLM_SERVE) for i, name in [(1, "kept"), (2, "cut")]
        )
        deleted["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
        deleted["spec"]["terminationGracePeriodSeconds"] = 20

        async def stop_during_one_request(pod: dict) -> tuple[int, list, int]:
            engines.on_pod_running(pod)
            url = f"http://{engines.api_endpoint(NS, pod['metadata']['name'])}"
            async with aiohttp.ClientSession() as session:
                streamed = asyncio.create_task(complete(session, url, max_tokens=200, stream=True))
                await asyncio.sleep(0.3)  # the answer is streaming
                stopping = asyncio.create_task(asyncio.to_thread(engines.on_pod_stopped, pod))
                await asyncio.sleep(0.2)
                late = 0
                if not stopping.done():
                    late, *_ = await complete(session, url, max_tokens=1)
                try:
                    status, events, *_ = await streamed
                except aiohttp.ClientError:
                    status, events = 0, []
                await stopping
                return status, events, late

        status, events, late = run(stop_during_one_request(deleted))
        assert status == 200 and events[-1] == "[DONE]", events[-3:]
        assert sum(len(e["choices"][0]["text"].split()) for e in events[:-1] if e["choices"]) == 200
        assert late == 503
        assert engines.api_endpoint(NS, "kept") is None

        status, events, late = run(stop_during_one_request(failed))
        assert late == 0, "a failed pod's engine stops at once"
        assert status == 0 or events[-1:] != ["[DONE]"], "the failed pod's answer was cut off"
    finally:
        engines.close()
