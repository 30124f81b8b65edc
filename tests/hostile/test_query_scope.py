"""A rule's raw query reads only its own namespace: every selector carries ``namespace="<own>"`` or it is refused."""

from __future__ import annotations

import time

import promql_parser
import pytest

from ascend_fleet.api import names
from ascend_fleet.api.query_scope import Selector, scope_problem, selectors_of
from ascend_fleet.promql.guarded import parse_guarded, parse_in_child
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.render.agreement import parse_here

OWN = "team-a"


def doc(query: str, namespace: str = OWN, name: str = "llm") -> dict:
    rule = {"query": query, "threshold": 2, "for": "5m", "action": "notify"}
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "m", "path": "/models/m"},
            "engine": {"type": "vllm-ascend"},
            "rules": [rule],
        },
    }


CONFINED = [
    'sum by (namespace, inference) (vllm:num_requests_waiting{namespace="team-a"})',
    'rate(x{namespace="team-a", job=~"j.*"}[5m])',
    'max_over_time(x{namespace="team-a"}[10m:1m]) / on (namespace) y{namespace="team-a"} offset 1h',
    '{__name__="z", namespace="team-a"}',
    'x{namespace="team-a", namespace=~".*"}',  # every matcher holds at once: still team-a only
    'x{namespace="team-a" or namespace="team-a", job="j"}',  # each alternative names it
    "vector(1)",  # reads no series
    'label_replace(x{namespace="team-a"}, "namespace", "team-b", "", "")',  # reads team-a; the result is its own
]

WIDE = {
    "up": "up",
    'x{namespace="team-b"}': 'x{namespace="team-b"}',
    'x{namespace=~"team-a|team-b"}': 'x{namespace=~"team-a|team-b"}',
    'x{namespace!="team-b"}': 'x{namespace!="team-b"}',
    'x{namespace="team-a"} + ignoring(namespace) y{namespace="team-b"}': 'y{namespace="team-b"}',
    'sum(rate(secret_total{job="k"}[5m]))': 'secret_total{job="k"}',
    'x{namespace="team-a" or job="j"}': 'x{ or namespace="team-a" or job="j"}',
    "max_over_time(sum by (namespace) (z)[10m:1m])": "z",
    'info(x{namespace="team-a"})': "info()",
    'quantile(scalar(x), y{namespace="team-a"})': "x",  # an aggregation's parameter reads series too
    'topk(1, -(y{namespace="team-a"} > bool z))': "z",
}


@pytest.mark.parametrize("query", CONFINED)
def test_a_query_confined_to_its_namespace_is_accepted(query):
    assert validate(doc(query), parse_query=parse_guarded).obj.spec.rules[0].query == query
    assert validate(doc(query)).obj.spec.rules[0].query == query  # the parser in this process agrees


@pytest.mark.parametrize(("query", "selector"), WIDE.items())
def test_a_query_that_may_read_another_namespace_is_refused_naming_the_selector(query, selector):
    for parse in (parse_guarded, parse_here):
        with pytest.raises(InvalidSpec) as refused:
            validate(doc(query), parse_query=parse)
        (problem,) = refused.value.problems
        assert problem.startswith(f"spec.rules[0].query: {selector} ")
        assert "is not confined to namespace team-a" in problem or selector == "info()"
        assert 'namespace="team-a"' in problem


def test_the_sentence_says_what_to_add():
    with pytest.raises(InvalidSpec) as refused:
        validate(doc('sum by (namespace, inference) (rate(x{job="j"}[5m])) > on() y offset 5m'))
    assert refused.value.problems == [
        'spec.rules[0].query: x{job="j"} (and 1 more selectors) is not confined to namespace team-a, and a rule '
        "may read only its own namespace's series (their values reach this object's Events and status.actions); "
        'add the matcher namespace="team-a" to every selector, as in x{job="j",namespace="team-a"}'
    ]


def test_the_namespace_is_the_objects_own():
    query = 'x{namespace="team-b"}'
    assert validate(doc(query, namespace="team-b"))
    with pytest.raises(InvalidSpec):
        validate(doc(query, namespace=OWN))


def test_the_child_and_this_process_find_the_same_selectors():
    query = 'a{namespace="n"} + on() group_left max_over_time(b[5m:1m]) + c{x="1" or namespace="n"} + info(d)'
    expected = (
        Selector('a{namespace="n"}', ("n",)),
        Selector("b"),
        Selector('c{ or x="1" or namespace="n"}'),
        Selector("info()"),
        Selector("d"),
    )
    assert parse_in_child(query).selectors == parse_here(query).selectors == expected


def test_listing_the_selectors_of_the_worst_admitted_query_takes_milliseconds():
    """1024 selectors in 2048 characters: the parser's own walk() took 112 s on it, the stack walk here none."""
    expr = promql_parser.parse("+".join([f"m{i % 100}" for i in range(600)]))
    started = time.perf_counter()
    assert len(selectors_of(expr)) == 100
    assert time.perf_counter() - started < 1.0


def test_a_long_selector_is_quoted_short():
    name = "m" * 1000
    (problem,) = [scope_problem("f", selectors_of(promql_parser.parse(name)), OWN) or ""]
    assert len(problem) < 400
    assert "m" * 117 + "..." in problem


def test_the_control_loop_drops_such_an_object_before_it_plans_a_query():
    """Evaluation checks again: the loop validates every object itself and plans queries for those that pass."""
    from ascend_fleet.api.settings import OperatorSettings
    from ascend_fleet.control.evaluate import queries_for
    from ascend_fleet.control.loop import ControlLoop

    settings = OperatorSettings.model_validate({"prometheus": {"url": "http://prometheus.invalid"}})
    loop = ControlLoop(settings, kube=None, prometheus=object())  # type: ignore[arg-type]
    mine, theirs = 'x{namespace="team-a"}', 'x{namespace="team-b"}'
    bodies = [
        {
            **doc(mine, name="own"),
            "metadata": {"name": "own", "namespace": OWN, "uid": "1", "resourceVersion": "1"},
        },
        {
            **doc(theirs, name="wide"),
            "metadata": {"name": "wide", "namespace": OWN, "uid": "2", "resourceVersion": "1"},
        },
    ]
    fleets = loop.states(bodies, {})
    assert [state.name for _, state in fleets] == ["own"]
    expressions = {q.window.expression for q in queries_for([s for _, s in fleets], loop.policy)}
    # Beside the built-in safety rule's recorded series, the one raw query planned is the confined one.
    assert mine in expressions and theirs not in expressions
    assert all(e == mine or not e.startswith("x{") for e in expressions), expressions
