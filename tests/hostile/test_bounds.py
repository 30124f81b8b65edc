"""Every string, list and map an AscendInference's spec holds has a bound in the CRD."""

from __future__ import annotations

from ascend_fleet.api.crd import openapi_schema


def unbounded(node: dict, path: str) -> list[str]:
    """The paths under ``node`` with no maxLength, maxItems or maxProperties; free-form objects are Kubernetes' own."""
    found = []
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if node.get("type") == "string" and "maxLength" not in node and "enum" not in node:
        found.append(path)
    if node.get("x-kubernetes-int-or-string") and "maxLength" not in node:
        found.append(path)
    if node.get("type") == "array":
        found += [path] if "maxItems" not in node else []
        found += unbounded(node.get("items") or {}, f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += [path] if "maxProperties" not in node else []
        found += unbounded(node["additionalProperties"], f"{path}{{}}")
    for key, child in (node.get("properties") or {}).items():
        found += unbounded(child, f"{path}.{key}")
    return found


def test_every_user_string_list_and_map_is_bounded():
    assert unbounded(openapi_schema()["properties"]["spec"], "spec") == []
