"""The PromQL parser runs in a child process whose limits stop a hostile query, and its answers are kept."""

from __future__ import annotations

import pytest

from ascend_fleet.api.query_scope import Selector
from ascend_fleet.promql import guarded
from ascend_fleet.promql.guarded import MEMORY_LIMIT, TIME_LIMIT, parse_guarded, parse_in_child
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.render.agreement import ParsedQuery
from tests.support.documents import inference


def chain(characters: int) -> str:
    """``a+a+...``: the parser's memory grows with the square of its length."""
    return "+".join(["a"] * (characters // 2))


def test_a_valid_and_a_broken_query_get_the_parsers_answer():
    assert parse_in_child("sum by (inference) (rate(x[5m]))") == ParsedQuery(selectors=(Selector("x"),))
    assert parse_in_child("sum(rate(x[5m])").error == "unclosed left parenthesis"


def test_the_worst_query_the_crd_admits_parses_within_the_limits():
    # the child also lists the query's selectors (api/query_scope.py): one, a, however often it appears
    assert parse_in_child(chain(2048)) == ParsedQuery(selectors=(Selector("a"),))


def test_a_12_kb_query_hits_the_memory_limit():
    parsed = parse_in_child(chain(12 * 1024))
    assert parsed.limit == "memory"
    assert parsed.stopped == f"more than {MEMORY_LIMIT // 2**20} MiB of memory"


def test_a_100_kb_query_hits_the_time_limit():
    parsed = parse_in_child(chain(100 * 1024))
    assert parsed.limit == "time"
    assert parsed.stopped == f"more than {TIME_LIMIT} s"


def test_a_100_kb_nesting_overflows_the_childs_stack_only():
    parsed = parse_in_child("(" * 50_000 + "1" + ")" * 50_000)
    assert parsed.limit == "stack"


def test_answers_are_kept_by_query_text(monkeypatch):
    children = []

    def counted(query: str) -> ParsedQuery:
        children.append(query)
        return ParsedQuery()

    monkeypatch.setattr(guarded, "parse_in_child", counted)
    monkeypatch.setattr(guarded, "_kept", type(guarded._kept)())
    for _ in range(3):
        parse_guarded("up")
        parse_guarded("down")
    assert children == ["up", "down"]


def test_a_child_that_cannot_start_is_asked_again(monkeypatch):
    monkeypatch.setattr(guarded.sys, "executable", "/nonexistent/python")
    monkeypatch.setattr(guarded, "_kept", type(guarded._kept)())
    assert parse_guarded("up").limit == "start"
    assert "up" not in guarded._kept


def test_an_over_limit_query_is_a_problem_of_its_object_with_what_fits(monkeypatch):
    stopped = ParsedQuery(limit="memory", stopped="more than 256 MiB of memory")
    doc = inference("q").engine("sglang").spec(rules=[_rule("up")]).build()
    with pytest.raises(InvalidSpec) as refused:
        validate(doc, parse_query=lambda query: stopped)
    (problem,) = refused.value.problems
    assert problem.startswith(
        "spec.rules[0].query: the PromQL parser was stopped after using more than 256 MiB of memory"
    )
    assert "fewer operators and less nesting fits" in problem


def test_a_query_over_the_bound_never_reaches_the_parser():
    asked = []
    doc = inference("q").engine("sglang").spec(rules=[_rule(chain(12 * 1024))]).build()
    with pytest.raises(InvalidSpec) as refused:
        validate(doc, parse_query=lambda query: asked.append(query) or ParsedQuery())
    assert asked == []
    assert refused.value.problems == [
        "spec.rules.0.query: 12287 characters, over the 2048 a rule's query may have (the operator parses every "
        "query on every pass); name the long part with a Prometheus recording rule and query the recorded "
        "series, or use a catalog metric"
    ]


def _rule(query: str) -> dict:
    return {"query": query, "threshold": 1, "for": "5m", "action": "scale_up"}
