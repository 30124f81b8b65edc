"""The KVTransfer condition's decision, its PromQL and its hook, without a cluster.

The decision over a real Prometheus scraping real vLLM engines is tested in
tests/realengine/test_kv_transfer_condition.py."""

from __future__ import annotations

import asyncio
import re

import pytest

from ascend_fleet.api.crd import PRINTER_COLUMNS
from ascend_fleet.control.kvtransfer import changes, kv_transfer_conditions, two_roles
from ascend_fleet.control.prometheus import Failed
from ascend_fleet.promql.guarded import parse_in_child
from ascend_fleet.status.kv_transfer import (
    CONDITION_KV_TRANSFER,
    DECODE_LEADER_PODS,
    REASON_NO_COUNTERS,
    REASON_NO_ENGINE_COUNTER,
    REASON_NO_TRAFFIC,
    REASON_NO_TRANSFER,
    REASON_TRANSFERRING,
    by_fleet,
    decide_kv_transfer,
    vllm_queries,
)


def test_tokens_received_by_transfer_make_it_true():
    status = decide_kv_transfer(transferred=768.0, requests=3.0, window=120)
    assert (status.status, status.reason) == ("True", REASON_TRANSFERRING)
    assert "768 prompt tokens" in status.message and "120s" in status.message


def test_requests_without_transfer_make_it_false_with_a_sentence():
    status = decide_kv_transfer(transferred=0.0, requests=4.0, window=60)
    assert (status.status, status.reason) == ("False", REASON_NO_TRANSFER)
    assert "finished 4 requests in the last 60s" in status.message
    assert "computed every prompt themselves" in status.message


def test_a_missing_transfer_series_beside_requests_is_false_too():
    assert decide_kv_transfer(transferred=None, requests=2.0).status == "False"


@pytest.mark.parametrize("requests", [0.0, None])
def test_no_traffic_is_unknown(requests):
    status = decide_kv_transfer(transferred=0.0, requests=requests)
    assert (status.status, status.reason) == ("Unknown", REASON_NO_TRAFFIC)


def test_no_series_at_all_is_unknown_and_names_the_counters():
    status = decide_kv_transfer(transferred=None, requests=None)
    assert (status.status, status.reason) == ("Unknown", REASON_NO_COUNTERS)
    assert "vllm:prompt_tokens_by_source_total" in status.message


def test_prometheus_failure_is_unknown_with_its_reason():
    status = decide_kv_transfer(
        5.0, 5.0, failure=("PrometheusUnavailable", "Prometheus at http://p is unreachable")
    )
    assert (status.status, status.reason) == ("Unknown", "PrometheusUnavailable")
    assert "unreachable" in status.message


def test_queries_read_the_decode_leaders_of_every_fleet_in_two_queries():
    queries = vllm_queries(90)
    for pod, matched in [("chat-decode-0", True), ("chat-decode-12", True), ("chat-prefill-0", False),
                         ("chat-decode-0-1", False), ("decode-prefill-0", False), ("x-decode-prefill-0", False)]:  # fmt: skip
        assert bool(re.fullmatch(DECODE_LEADER_PODS, pod)) is matched, pod
    assert 'source="external_kv_transfer"' in queries.transferred
    assert "[90s]" in queries.transferred and "[90s]" in queries.requests
    for promql in (queries.transferred, queries.requests):
        assert promql.startswith("sum by (namespace, inference) (")
        parsed = parse_in_child(promql)  # the PromQL parser the operator checks rules with
        assert parsed.error is None and parsed.limit is None, parsed


def test_grouped_answers_are_read_by_fleet():
    answer = [
        _sample("a", "pd", 256),
        _sample("b", "pd", 0),
        {"metric": {"namespace": "c"}, "value": [1, "5"]},
    ]
    assert by_fleet(answer) == {("a", "pd"): 256.0, ("b", "pd"): 0.0}


class _Prometheus:
    """Answers the two instant queries with given vectors, or fails; records what was asked."""

    def __init__(self, answers: dict[str, list] | None = None, failure: Failed | None = None):
        self.answers, self.failure, self.asked = answers or {}, failure, []

    async def instant(self, promql: str, at: float) -> list:
        self.asked.append(promql)
        if self.failure:
            raise self.failure
        return next((v for k, v in self.answers.items() if k in promql), [])


def _fleet(name: str = "pd", engine: str = "vllm-ascend", namespace: str = "ns") -> dict:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"engine": {"type": engine}, "disaggregation": {"prefill": {}, "decode": {}}},
    }


def _sample(namespace: str, inference: str, value: float) -> dict:
    return {"metric": {"namespace": namespace, "inference": inference}, "value": [1.0, str(value)]}


def _decide(prometheus: _Prometheus, bodies: list[dict]) -> dict:
    return asyncio.run(kv_transfer_conditions(prometheus, bodies, 1000.0))  # type: ignore[arg-type]


def test_hook_decides_every_fleet_from_two_queries():
    prometheus = _Prometheus(
        {
            "external_kv_transfer": [_sample("ns", "moving", 512), _sample("ns", "broken", 0)],
            "request_success": [
                _sample("ns", "moving", 2),
                _sample("ns", "broken", 3),
                _sample("ns", "idle", 0),
            ],
        }
    )
    bodies = [_fleet("moving"), _fleet("broken"), _fleet("idle"), _fleet("absent"),
              {"metadata": {"namespace": "ns", "name": "colocated"}, "spec": {"parallelism": {"data": 2}}}]  # fmt: skip
    decided = _decide(prometheus, bodies)
    assert {name: (s.status, s.reason) for (_, name), s in decided.items()} == {
        "moving": ("True", REASON_TRANSFERRING),
        "broken": ("False", REASON_NO_TRANSFER),
        "idle": ("Unknown", REASON_NO_TRAFFIC),
        "absent": ("Unknown", REASON_NO_COUNTERS),
    }
    assert len(prometheus.asked) == 2


def test_hook_turns_a_failed_query_into_unknown():
    prometheus = _Prometheus(failure=Failed("QueryFailed", "Prometheus answered HTTP 400"))
    status = _decide(prometheus, [_fleet()])[("ns", "pd")]
    assert (status.status, status.reason) == ("Unknown", "QueryFailed")


def test_sglang_is_unknown_without_asking_prometheus():
    prometheus = _Prometheus({"external_kv_transfer": [_sample("ns", "pd", 500)]})
    status = _decide(prometheus, [_fleet(engine="sglang")])[("ns", "pd")]
    assert (status.status, status.reason) == ("Unknown", REASON_NO_ENGINE_COUNTER)
    assert prometheus.asked == [] and "sglang exports no counter" in status.message


def test_no_two_role_fleet_asks_nothing():
    prometheus = _Prometheus()
    deleting = _fleet()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert _decide(prometheus, [deleting, {"metadata": {"name": "c"}, "spec": {}}]) == {}
    assert prometheus.asked == [] and not two_roles(deleting)


def test_a_new_sentence_alone_is_not_a_write():
    stored = {"status": {"conditions": [{"type": CONDITION_KV_TRANSFER, "status": "True",
                                         "reason": REASON_TRANSFERRING, "message": "received 256"}]}}  # fmt: skip
    assert not changes(stored, decide_kv_transfer(512.0, 2.0))
    assert changes(stored, decide_kv_transfer(0.0, 2.0)) and changes({}, decide_kv_transfer(512.0, 2.0))


def test_kubectl_get_shows_the_condition():
    column = next(c for c in PRINTER_COLUMNS if c["name"] == "KV-Transfer")
    assert column["jsonPath"] == '.status.conditions[?(@.type=="KVTransfer")].status'
    assert "priority" not in column  # in the default view, not only -o wide
