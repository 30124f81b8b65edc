"""Kubernetes label and field selectors: parsing and matching, as the API server does them (pure).

Label selectors follow ``k8s.io/apimachinery/pkg/labels``: comma-separated requirements, each one of
``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``,
``key>1``, ``key<1``. Field selectors take ``path=value``, ``path==value`` and ``path!=value`` on any
dotted field path (a real server allows only a few paths per kind; this one allows all of them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector that cannot be parsed; the message says which part is wrong."""


_SET_TERM = re.compile(r"^\s*(?P<key>[^\s!=<>(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(?P<neg>!)?\s*(?P<key>[^\s!=<>(),]+)\s*$")
_VALUE_TERM = re.compile(r"^\s*(?P<key>[^\s!=<>(),]+)\s*(?P<op>==|=|!=|>|<)\s*(?P<value>[^\s!=<>(),]*)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    operator: str  # one of: in, notin, exists, !, =, !=, >, <
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this term (absent keys satisfy only the negative terms)."""
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "exists":
                return present
            case "!":
                return not present
            case "in" | "=":
                return present and value in self.values
            case "notin" | "!=":
                return not present or value not in self.values
            case ">" | "<":
                return present and _compare(value, self.operator, self.values[0])
        raise SelectorError(f"unknown operator {self.operator!r}")  # pragma: no cover


def _compare(value: str | None, operator: str, bound: str) -> bool:
    try:
        number = int(value or "")
    except ValueError:
        return False
    return number > int(bound) if operator == ">" else number < int(bound)


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse the ``labelSelector`` query parameter; raise :class:`SelectorError` if malformed."""
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_term(term) for term in _split_terms(text)))

    @classmethod
    def from_object(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """Build from a ``metav1.LabelSelector`` object (``matchLabels`` + ``matchExpressions``)."""
        selector = selector or {}
        terms = [
            Requirement(key, "=", (str(value),)) for key, value in (selector.get("matchLabels") or {}).items()
        ]
        operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
        for expression in selector.get("matchExpressions") or []:
            operator = operators.get(expression.get("operator", ""))
            if operator is None:
                raise SelectorError(f"unknown matchExpressions operator {expression.get('operator')!r}")
            terms.append(Requirement(expression["key"], operator, tuple(expression.get("values") or ())))
        return cls(tuple(terms))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether all terms hold for the label set."""
        return all(term.matches(labels or {}) for term in self.requirements)

    def __str__(self) -> str:
        return ",".join(_format_term(term) for term in self.requirements)


def _split_terms(text: str) -> list[str]:
    # Commas separate terms except inside the parentheses of `in (a,b)`.
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return terms


def _parse_term(term: str) -> Requirement:
    if match := _SET_TERM.match(term):
        values = tuple(value.strip() for value in match["values"].split(",") if value.strip())
        return Requirement(match["key"], match["op"], values)
    if match := _EXISTS_TERM.match(term):
        return Requirement(match["key"], "!" if match["neg"] else "exists")
    if match := _VALUE_TERM.match(term):
        operator = "=" if match["op"] == "==" else match["op"]
        if operator in (">", "<") and not re.fullmatch(r"-?\d+", match["value"]):
            raise SelectorError(f"label selector term {term.strip()!r}: {operator} needs an integer")
        return Requirement(match["key"], operator, (match["value"],))
    raise SelectorError(f"unable to parse label selector term {term.strip()!r}")


def _format_term(term: Requirement) -> str:
    match term.operator:
        case "exists":
            return term.key
        case "!":
            return f"!{term.key}"
        case "in" | "notin":
            return f"{term.key} {term.operator} ({','.join(term.values)})"
    return f"{term.key}{term.operator}{term.values[0]}"


@dataclass(frozen=True)
class FieldRequirement:
    """One term of a field selector: a dotted path compared with a value."""

    path: str
    operator: str  # = or !=
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's field (rendered as a string, absent = "") satisfies the term."""
        actual = field_value(obj, self.path)
        return (actual == self.value) == (self.operator == "=")


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector; the empty selector matches everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        """Parse the ``fieldSelector`` query parameter; raise :class:`SelectorError` if malformed."""
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_field_term(term) for term in _split_escaped(text, ",")))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether all terms hold for the object."""
        return all(term.matches(obj) for term in self.requirements)

    def value_of(self, path: str) -> str | None:
        """The value an ``=`` term requires for ``path`` (e.g. the name of a single-object watch)."""
        return next((t.value for t in self.requirements if t.path == path and t.operator == "="), None)


def _split_escaped(text: str, separator: str) -> list[str]:
    # Field values may escape the separators with a backslash: `metadata.name=a\,b`.
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _parse_field_term(term: str) -> FieldRequirement:
    for token, operator in (("!=", "!="), ("==", "="), ("=", "=")):
        path, found, value = term.partition(token)
        if found and path.strip():
            return FieldRequirement(path.strip(), operator, value.strip())
    raise SelectorError(f"invalid field selector term {term.strip()!r}: expected path=value or path!=value")


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value at a dotted path as a field selector sees it: strings as-is, absent as ""."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
