"""Which namespaces a rule's raw PromQL reads: every selector of the parsed query, and what pins it.

A rule's query runs with the operator's Prometheus credentials, which read every namespace, and its value
comes back in the object's Events and ``status.actions``. So a query may read only series of the object's
own namespace: every vector selector (a range selector holds one) must carry the equality matcher
``namespace="<own namespace>"``. Matchers of one selector all hold at once, so that matcher confines the
selector whatever else it says. The parser's ``or`` alternatives (``{a="1" or b="2"}``) read the union, so
each alternative needs the matcher. ``info()`` reads ``target_info`` series the query does not name, so it
is counted as a selector that no matcher pins.

This module imports only the parser: the parser's child process (``promql.child``) imports it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import promql_parser

# The label Prometheus's Kubernetes discovery gives every series of a pod: the pod's namespace (the
# catalog's series carry it too, see catalog.REPLICA_LABELS).
NAMESPACE_LABEL = "namespace"
# Functions that read series the query does not name (Prometheus 3's experimental info() joins target_info).
IMPLICIT_READS = frozenset({"info"})
# How much of a selector a refusal quotes: a query is at most 2048 characters, a sentence should be short.
QUOTED = 120


@dataclass(frozen=True)
class Selector:
    """One place a query reads series: the selector as PromQL prints it, and the namespaces that confine it.

    ``pinned`` holds every namespace ``n`` such that the selector reads only series with ``namespace="n"``
    (or none at all); empty when it may read any namespace.
    """

    text: str
    pinned: tuple[str, ...] = ()


def _equal_namespaces(matchers: Iterable[Any]) -> set[str]:
    return {m.value for m in matchers if m.name == NAMESPACE_LABEL and m.op == promql_parser.MatchOp.Equal}


def _selector(node: Any) -> Selector:
    matchers = node.matchers
    pinned = _equal_namespaces(matchers.matchers)
    alternatives = [_equal_namespaces(group) for group in matchers.or_matchers]
    if alternatives:
        pinned |= set.intersection(*alternatives)
    return Selector(str(node).replace("{}", ""), tuple(sorted(pinned)))


def _children(node: Any) -> list[Any] | None:
    """The sub-expressions of one node, or None for a kind of node this module does not know."""
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.AggregateExpr):
        return [node.param, node.expr] if isinstance(node.param, promql_parser.Expr) else [node.expr]
    if isinstance(node, (promql_parser.UnaryExpr, promql_parser.ParenExpr, promql_parser.SubqueryExpr)):
        return [node.expr]
    if isinstance(node, promql_parser.Call):
        return [arg for arg in node.args if isinstance(arg, promql_parser.Expr)]
    if isinstance(node, promql_parser.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, (promql_parser.NumberLiteral, promql_parser.StringLiteral)):
        return []
    return None


def selectors_of(expr: Any) -> tuple[Selector, ...]:
    """Every distinct selector of a parsed query, in the order they appear.

    The tree is walked here, depth first with a stack: the parser's own ``walk`` takes minutes on the longest
    query the CRD admits (about 112 s for 1024 selectors), this a millisecond. A kind of node this module does
    not know (a newer parser's) counts as a selector nothing pins, so it is refused rather than let through.
    """
    found: dict[Selector, None] = {}
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, promql_parser.VectorSelector):
            found[_selector(node)] = None
            continue
        if isinstance(node, promql_parser.Call) and node.func.name in IMPLICIT_READS:
            found[Selector(f"{node.func.name}()")] = None
        children = _children(node)
        if children is None:
            found[Selector(type(node).__name__)] = None
            continue
        stack.extend(reversed(children))
    return tuple(found)


def outside(selectors: Iterable[Selector], namespace: str) -> list[Selector]:
    """The selectors that may read series of another namespace than ``namespace``."""
    return [s for s in selectors if namespace not in s.pinned]


def with_matcher(text: str, matcher: str) -> str:
    """A selector as the parser prints it (``name{a="b"} offset 5m``) with one more matcher."""
    close = text.rfind("}")
    if close >= 0:
        return f"{text[:close]},{matcher}{text[close:]}"
    name, space, rest = text.partition(" ")
    return f"{name}{{{matcher}}}{space}{rest}"


def scope_problem(field: str, selectors: Iterable[Selector], namespace: str) -> str | None:
    """A sentence for a query that may read another namespace's series, naming the first such selector."""
    wide = outside(selectors, namespace)
    if not wide:
        return None
    first = wide[0].text if len(wide[0].text) <= QUOTED else wide[0].text[: QUOTED - 3] + "..."
    more = f" (and {len(wide) - 1} more selectors)" if len(wide) > 1 else ""
    matcher = f'{NAMESPACE_LABEL}="{namespace}"'
    if wide[0].text.endswith("()"):
        fix = f"join target_info{{{matcher}}} explicitly instead of calling {wide[0].text}"
    else:
        fix = f"add the matcher {matcher} to every selector"
        if len(wide[0].text) <= QUOTED and " or " not in wide[0].text:
            fix += f", as in {with_matcher(wide[0].text, matcher)}"
    return (
        f"{field}: {first}{more} is not confined to namespace {namespace}, and a rule may read only its own "
        f"namespace's series (their values reach this object's Events and status.actions); {fix}"
    )
