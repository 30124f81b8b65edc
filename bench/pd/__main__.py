"""``python -m bench.pd [--json FILE]``: one trace on two colocated engines, then on one prefill + one decode.

Real engines throughout: ``vllm serve`` of the tiny model on vLLM's CPU build (``make engine-vllm``).

- **colocated**: two ordinary engines, the trace's requests alternating between them;
- **disaggregated**: a prefill engine and a decode engine with vLLM's ExampleConnector over one directory and
  llm-d's P/D sidecar in front of the decode engine (``make pd-sidecar``); every request goes to the sidecar
  with the prefill engine named, as the picker's P/D plugins name it. The tokens moved by KV transfer are the
  decode engine's own counter (``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``).
- **the floor**: before the trace, one request at a time on an idle colocated engine.
- **a broken transfer**: a real Prometheus scrapes the pair (labelled as the chart labels engine pods); under
  steady traffic the decode engine's KV directory is pointed at an empty one, and the operator's own
  KVTransfer decision over that Prometheus is polled every second: ``kv_condition_false_s`` is the seconds from
  the cut to ``False``, with the window given (``--window``; the operator's is 120 s).

Two cores run both engines and the client: the figures show what disaggregation costs and proves here, not the
speed-up it brings on separate accelerators (docs/disaggregation.md says what they show).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import aiohttp

from ascend_fleet_dev.fleet.prometheus import PrometheusServer
from ascend_fleet_dev.real.disaggregation import (
    SERVED_MODEL,
    SOURCE_COMPUTED,
    SOURCE_TRANSFERRED,
    Disaggregated,
    TinyEngine,
    ensure_pd_sidecar,
)
from ascend_fleet_dev.real.kvproof import (
    PROMPT_WORDS,
    KVSwitch,
    SteadyClient,
    fresh_prompt,
    scrape_targets,
    wait_condition,
)
from ascend_fleet_dev.real.vllm_env import VllmCpu, find_environment

from .figures import Answer, Arrival, Figures, figures, table, trace

FLOOR_REQUESTS = 5
WINDOW = 15.0


async def _one(session: aiohttp.ClientSession, url: str, headers: dict, output: int) -> Answer:
    body = {"model": SERVED_MODEL, "prompt": fresh_prompt(), "max_tokens": output, "temperature": 0,
            "stream": True, "ignore_eos": True}  # fmt: skip
    sent, first, tokens = time.monotonic(), None, 0
    try:
        async with session.post(f"{url}/v1/completions", json=body, headers=headers) as response:
            if response.status != 200:
                return Answer(sent, error=f"HTTP {response.status}: {(await response.text())[:200]}")
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[5:]).get("choices") or []
                if choices and choices[0].get("text"):
                    first = first or time.monotonic()
                    tokens += 1
    except (aiohttp.ClientError, TimeoutError) as error:
        return Answer(sent, error=f"{type(error).__name__}: {error}")
    return Answer(sent, first, time.monotonic(), tokens)


async def _replay(arrivals: list[Arrival], targets: list[tuple[str, dict]]) -> list[Answer]:
    """Send each arrival on time, round-robin over ``targets`` (url, headers); every answer streamed."""
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = time.monotonic()

        async def at(i: int, arrival: Arrival) -> Answer:
            await asyncio.sleep(max(0.0, start + arrival.at - time.monotonic()))
            url, headers = targets[i % len(targets)]
            return await _one(session, url, headers, arrival.output)

        return list(await asyncio.gather(*(at(i, a) for i, a in enumerate(arrivals))))


def replay(arrivals: list[Arrival], targets: list[tuple[str, dict]]) -> Figures:
    return figures(asyncio.run(_replay(arrivals, targets)))


def floor(url: str, output: int) -> Figures:
    """One request at a time on an idle engine."""
    return figures(
        [asyncio.run(_replay([Arrival(0.0, output)], [(url, {})]))[0] for _ in range(FLOOR_REQUESTS)]
    )


def colocated(environment: VllmCpu, arrivals: list[Arrival], work: Path) -> tuple[Figures, Figures]:
    """Two ordinary engines: the floor on the first, then the trace over both."""
    engines = [TinyEngine(environment, f"colocated-{i}", None, work) for i in range(2)]
    try:
        for engine in engines:
            engine.start()
        with ThreadPoolExecutor(2) as pool:
            for waited in [pool.submit(engine.wait_healthy) for engine in engines]:
                waited.result()
        replay(arrivals[:2], [(e.url, {}) for e in engines])  # warm both (first-request compilation)
        idle = floor(engines[0].url, arrivals[0].output)
        return idle, replay(arrivals, [(e.url, {}) for e in engines])
    finally:
        for engine in engines:
            engine.stop()


def disaggregated(environment: VllmCpu, arrivals: list[Arrival], work: Path, window: float) -> dict:
    """One prefill + one decode behind the sidecar: the trace, the tokens moved, then the transfer broken."""
    switch = KVSwitch(work)
    pd = Disaggregated(environment, sidecar_binary=ensure_pd_sidecar(), decode_directory=switch.link)
    assert pd.prefill.shared_directory is not None
    switch.point(pd.prefill.shared_directory)
    with PrometheusServer(scrape_interval="1s") as prometheus, pd:
        prometheus.set_targets(scrape_targets(pd))
        prometheus.wait_for_targets(2, timeout=30)
        headers = dict(pd.headers())
        replay(arrivals[:2], [(pd.url, headers)])  # warm up as the colocated engines were
        decode_before, prefill_before = pd.decode.prompt_tokens(), pd.prefill.prompt_tokens()
        result = replay(arrivals, [(pd.url, headers)])
        decode, prefill = pd.decode.prompt_tokens(), pd.prefill.prompt_tokens()
        moved = {
            "kv_transfer_tokens": decode.get(SOURCE_TRANSFERRED, 0)
            - decode_before.get(SOURCE_TRANSFERRED, 0),
            "decode_computed_tokens": decode.get(SOURCE_COMPUTED, 0) - decode_before.get(SOURCE_COMPUTED, 0),
            "prefill_computed_tokens": prefill.get(SOURCE_COMPUTED, 0)
            - prefill_before.get(SOURCE_COMPUTED, 0),
        }
        traffic = SteadyClient(pd.url, headers, pause=1.0).start()
        try:
            wait_condition(prometheus.url, window, "True", timeout=60)
            switch.cut()
            seconds, broken = wait_condition(prometheus.url, window, "False", timeout=window + 120)
        finally:
            traffic.stop()
        return {
            "figures": result,
            **moved,
            "kv_condition_false_s": round(seconds, 1),
            "kv_condition_message": broken.message,
            "requests_after_cut_failed": len(traffic.failed),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pd", description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--window", type=float, default=WINDOW, help="the KVTransfer window of the broken run (s)"
    )
    args = parser.parse_args(argv)
    environment = find_environment()
    if environment is None:
        print("vLLM's CPU build is missing: make engine-vllm", file=sys.stderr)
        return 2
    arrivals, started = trace(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-pd-") as root:
        print("colocated: two engines ...", file=sys.stderr, flush=True)
        idle, together = colocated(environment, arrivals, Path(root))
        print("disaggregated: one prefill + one decode ...", file=sys.stderr, flush=True)
        apart = disaggregated(environment, arrivals, Path(root), args.window)
    fleets = {"colocated (2 engines)": together, "disaggregated (1 prefill + 1 decode)": apart["figures"]}
    print(f"\n{len(arrivals)} requests at {arrivals[-1].at / max(1, len(arrivals) - 1):.2f} s apart on average, "
          f"{arrivals[0].output} output tokens each, prompts of {PROMPT_WORDS} words (about 367 tokens of the tiny model)\n")  # fmt: skip
    print(table(fleets, idle))
    print(
        f"\nKV transfer: the decode engine loaded {apart['kv_transfer_tokens']:.0f} prompt tokens and computed "
        f"{apart['decode_computed_tokens']:.0f}; the prefill engine computed {apart['prefill_computed_tokens']:.0f}"
    )
    print(f"broken transfer: KVTransfer=False {apart['kv_condition_false_s']} s after the cut (window {args.window:g} s; "
          f"{apart['requests_after_cut_failed']} requests failed meanwhile): {apart['kv_condition_message']}")  # fmt: skip
    if args.json:
        document = {
            "colocated": asdict(together),
            "disaggregated": asdict(apart["figures"]),
            "floor": asdict(idle),
            **{k: v for k, v in apart.items() if k != "figures"},
            "kv_condition_window_s": args.window,
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nin {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
