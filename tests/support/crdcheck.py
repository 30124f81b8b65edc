"""Validate custom resources the way the API server does: defaults, the CRD's OpenAPI schema, its CEL rules.

An approximation for fast tests: the real API server (tests/realapi) is the arbiter. The CRD's
defaults are applied first, as the server does before validating; the OpenAPI v3.0 dialect is mapped
onto JSON Schema (jsonschema's Draft 4 keeps boolean exclusiveMinimum), ``x-kubernetes-int-or-string``
onto an int|string union, and every ``x-kubernetes-validations`` rule is evaluated with cel-python at its
node, ``self`` bound to the value there (numbers of ``type: number`` nodes are doubles, as the API server
presents them); a failing rule reports its ``messageExpression`` when it has one. cel-python computes no
cost and compiles what the server may refuse: it cannot tell whether the server accepts the CRD.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import jsonschema


def _to_jsonschema(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {k: _to_jsonschema(v) for k, v in value.items()}
            # What `kubectl apply` is told: its default strict field validation refuses unknown fields (other
            # clients get them pruned with a warning; tests/realapi shows both). pydantic forbids them too.
            out["additionalProperties"] = False
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _to_jsonschema(value)
        elif key == "x-kubernetes-int-or-string":
            out["type"] = ["integer", "string"]
        elif key.startswith("x-kubernetes-") or key == "description":
            continue
        else:
            out[key] = value
    if node.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    return out


def schema_errors(schema: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """OpenAPI schema violations as ``path: message``."""
    validator = jsonschema.Draft4Validator(_to_jsonschema(schema))
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(obj)
    ]


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """The value with the schema's defaults filled in where a field is missing (a copy)."""
    value = copy.deepcopy(value)
    _fill(schema, value)
    return value


def _fill(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        for key, child in schema.get("properties", {}).items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                _fill(child, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _fill(schema["items"], item)


_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}
# The Kubernetes CEL library's string extension, as far as the CRD uses it.
_FUNCTIONS = {
    "replace": lambda text, old, new: celpy.celtypes.StringType(str(text).replace(str(old), str(new)))
}


def _program(rule: str) -> Any:
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule), functions=_FUNCTIONS)
    return _PROGRAMS[rule]


def _message(rule: dict[str, Any], activation: dict[str, Any]) -> str:
    if "messageExpression" in rule:
        result = _program(rule["messageExpression"]).evaluate(activation)
        if not isinstance(result, Exception):
            return str(result)
    return rule.get("message", f"failed rule: {rule['rule']}")


def _as_api_server_sees(node: dict[str, Any], value: Any) -> Any:
    """Numbers in ``type: number`` nodes become doubles, as the API server decodes them."""
    if node.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict) and "properties" in node:
        return {k: _as_api_server_sees(node["properties"].get(k, {}), v) for k, v in value.items()}
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_as_api_server_sees(node["items"], v) for v in value]
    return value


def cel_errors(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Messages of every CEL rule that fails, walking the schema alongside the value."""
    errors = []
    value = _as_api_server_sees(schema, value)
    for rule in schema.get("x-kubernetes-validations", []):
        activation = {"self": celpy.json_to_cel(value)}
        result = _program(rule["rule"]).evaluate(activation)
        if isinstance(result, Exception) or not bool(result):
            where = path + rule.get("fieldPath", "") if path else rule.get("fieldPath", "").lstrip(".")
            errors.append(f"{where or '<root>'}: {_message(rule, activation)}")
    if isinstance(value, dict):
        for key, child in schema.get("properties", {}).items():
            if key in value:
                errors += cel_errors(child, value[key], f"{path}.{key}" if path else key)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += cel_errors(schema["items"], item, f"{path}[{index}]")
    return errors


def api_server_errors(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """What ``kubectl apply`` would be told: schema errors first; CEL runs only on schema-valid input."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    obj = with_defaults(schema, obj)
    errors = schema_errors(schema, obj)
    return errors or cel_errors(schema, obj)
