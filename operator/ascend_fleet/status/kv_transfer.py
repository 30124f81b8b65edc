"""The ``KVTransfer`` condition of a two-role fleet: is KV cache really moving from prefill to decode? (pure)

A prefill/decode pair can answer every request while no KV block ever moves: a decode engine that finds
nothing to load computes the prompt itself. Readiness cannot tell; only the decode engine's own counters can.
The condition is decided from two increases over a recent window, both over the fleet's decode leaders:

- vLLM: ``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``, prompt tokens whose KV cache
  the engine received through its KV connector (vLLM's ``v1/metrics/loggers.py``, sources
  ``local_compute``, ``local_cache_hit``, ``external_kv_transfer``), against
  ``vllm:request_success_total``, the requests the engine finished;
- SGLang has no such counter: its KV-transfer series are gauges of the latest transfer
  (``sglang:kv_transfer_total_mb``, ``sglang:kv_transfer_speed_gb_s``) and a counter of failed transfers
  (``sglang:num_transfer_failed_reqs_total``; ``python/sglang/srt/metrics/collector.py``), and in decode mode
  a request whose transfer fails is aborted rather than computed, so the condition stays ``Unknown`` and says so.

``True`` while tokens arrived by transfer; ``False`` with a sentence while requests were finished and none
arrived; ``Unknown`` without traffic, without the counters, or when Prometheus cannot answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..api import names

CONDITION_KV_TRANSFER = "KVTransfer"
# The recent window the increases are taken over: long enough for a few scrapes at Prometheus's usual 15 s.
KV_TRANSFER_WINDOW_SECONDS = 120.0

# vLLM's own counters (vllm/v1/metrics/loggers.py), as Prometheus stores them.
VLLM_PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
VLLM_SOURCE_TRANSFERRED = "external_kv_transfer"
VLLM_REQUESTS_FINISHED = "vllm:request_success_total"

REASON_TRANSFERRING = "Transferring"
REASON_NO_TRANSFER = "NoKVTransfer"
REASON_NO_TRAFFIC = "NoTraffic"
REASON_NO_COUNTERS = "NoDecodeMetrics"
REASON_NO_ENGINE_COUNTER = "NoEngineCounter"

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class KVTransferQueries:
    """The two instant queries of one fleet: tokens received by transfer, and requests finished."""

    transferred: str
    requests: str


@dataclass(frozen=True)
class KVTransferStatus:
    """The condition's status, reason and sentence."""

    status: Status
    reason: str
    message: str


# The decode leaders of every two-role fleet (``<name>-decode-<replica>``): the pods that serve and export the
# engine's metrics, matched on the ``pod`` label every scrape configuration of pods keeps. With the ``inference``
# label beside it, only the decode leaders of that fleet match (a fleet's workers end in ``-<replica>-<rank>``,
# its prefill pods in ``-prefill-<replica>``).
DECODE_LEADER_PODS = f".+-{names.PD_DECODE}-[0-9]+"
Key = tuple[str, str]  # namespace, inference


def vllm_queries(window: float = KV_TRANSFER_WINDOW_SECONDS) -> KVTransferQueries:
    """The PromQL of every vLLM fleet's decode engines over ``window`` seconds, by namespace and inference: two
    queries a cycle however many fleets there are."""
    selector = f'pod=~"{DECODE_LEADER_PODS}"'
    span = f"{window:g}s"
    return KVTransferQueries(
        transferred=(
            f"sum by (namespace, inference) (increase({VLLM_PROMPT_TOKENS_BY_SOURCE}"
            f'{{{selector},source="{VLLM_SOURCE_TRANSFERRED}"}}[{span}]))'
        ),
        requests=f"sum by (namespace, inference) (increase({VLLM_REQUESTS_FINISHED}{{{selector}}}[{span}]))",
    )


def by_fleet(result: list) -> dict[Key, float]:
    """A grouped answer's values by (namespace, inference); samples without both labels or a number are left out."""
    values: dict[Key, float] = {}
    for sample in result:
        try:
            metric, value = sample["metric"], float(sample["value"][1])
            values[(metric["namespace"], metric["inference"])] = value
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return values


def no_engine_counter(engine: str) -> KVTransferStatus:
    """The condition of an engine without a counter of tokens received by transfer (SGLang)."""
    return KVTransferStatus(
        "Unknown",
        REASON_NO_ENGINE_COUNTER,
        f"{engine} exports no counter of prompt tokens received by KV transfer (its KV-transfer series are "
        "gauges of the latest transfer and a count of failed ones), so the operator cannot prove the transfer; "
        "a decode engine of SGLang fails a request whose KV does not arrive rather than computing it",
    )


def decide_kv_transfer(
    transferred: float | None,
    requests: float | None,
    window: float = KV_TRANSFER_WINDOW_SECONDS,
    failure: tuple[str, str] | None = None,
) -> KVTransferStatus:
    """The condition from the two increases over ``window`` (None: Prometheus has no such series), or from
    ``failure`` (reason, sentence) when Prometheus did not answer."""
    if failure is not None:
        reason, message = failure
        return KVTransferStatus("Unknown", reason, f"cannot read the decode engines' counters: {message}")
    span = f"{window:g}s"
    if transferred is not None and transferred > 0:
        return KVTransferStatus(
            "True",
            REASON_TRANSFERRING,
            f"the decode engines received {transferred:.0f} prompt tokens by KV transfer in the last {span}",
        )
    if requests is None and transferred is None:
        return KVTransferStatus(
            "Unknown",
            REASON_NO_COUNTERS,
            f"Prometheus has no {VLLM_REQUESTS_FINISHED} or {VLLM_PROMPT_TOKENS_BY_SOURCE} series of the decode "
            "pods (pod label <name>-decode-<replica>): check that their engine metrics are scraped",
        )
    if requests is None or requests <= 0:
        return KVTransferStatus(
            "Unknown", REASON_NO_TRAFFIC, f"the decode engines finished no request in the last {span}"
        )
    return KVTransferStatus(
        "False",
        REASON_NO_TRANSFER,
        f"the decode engines finished {requests:.0f} requests in the last {span} but received no prompt token "
        "by KV transfer: they computed every prompt themselves; check that requests reach them through the "
        "P/D sidecar with a prefill pod named, and that both roles' KV connector reaches the same store",
    )
