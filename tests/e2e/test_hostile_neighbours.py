"""One hostile object beside ordinary fleets: the worst rule queries the CRD admits cost their own object a
``Ready=False`` sentence, and every other fleet, before and after them, is reconciled as usual."""

from __future__ import annotations

import copy

import pytest

from ascend_fleet.api.bounds import MAX_QUERY_LENGTH
from ascend_fleet.kube import wait_for
from tests.e2e.fleet import example

pytestmark = pytest.mark.e2e


def named(doc: dict, name: str) -> dict:
    doc = copy.deepcopy(doc)
    doc["metadata"]["name"] = name
    return doc


def hostile(name: str, query: str) -> dict:
    assert len(query) <= MAX_QUERY_LENGTH  # the API server admits it: the operator must bear it
    rule = {"query": query, "threshold": 1, "for": "5m", "action": "scale_up"}
    return named(example("sglang-small.yaml", rules=[rule]), name)


# The parser's worst case within the bound: memory grows with the square of a flat chain's length, and a
# deep nesting is what overflowed its stack.
CHAIN = "+".join(["a"] * (MAX_QUERY_LENGTH // 2))
NESTING = "(" * (MAX_QUERY_LENGTH // 2 - 1) + "a" + ")" * (MAX_QUERY_LENGTH // 2 - 1)


def test_the_worst_queries_stop_only_their_own_objects(fleet):
    ordinary = example("sglang-small.yaml")
    fleet.apply(named(ordinary, "before"))
    fleet.apply(hostile("chain", CHAIN))
    fleet.apply(hostile("nesting", NESTING))
    fleet.apply(named(ordinary, "after"))

    for name in ("before", "after"):
        fleet.wait_ready(name, 1, timeout=60)
    for name in ("chain", "nesting"):
        condition = wait_for(
            lambda name=name: (c := fleet.condition(name, "Ready")).get("reason") == "InvalidSpec" and c,
            60,
            f"{name}: Ready=False/InvalidSpec",
        )
        assert condition["status"] == "False"
        assert "spec.rules[0].query" in condition["message"], condition["message"]
        assert "\n" not in condition["message"]
        assert fleet.pod_names(name) == []

    # The operator goes on: a fleet applied after the hostile ones were refused is reconciled too.
    fleet.apply(named(ordinary, "later"))
    fleet.wait_ready("later", 1, timeout=60)
