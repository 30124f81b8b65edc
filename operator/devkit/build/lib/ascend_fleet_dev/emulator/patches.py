"""The PATCH flavours of the Kubernetes API, applied to plain dicts (pure).

- JSON merge patch (RFC 7386, ``application/merge-patch+json``), as kopf and ``kubectl patch --type=merge``;
- JSON patch (RFC 6902, ``application/json-patch+json``), with ``test``, which kopf uses as a precondition;
- strategic merge patch (``application/strategic-merge-patch+json``): a merge patch that merges the well-known
  lists of built-in kinds by their merge keys (containers by ``name``, ports by ``containerPort``...), honours
  the ``$patch``/``$retainKeys``/``$deleteFromPrimitiveList``/``$setElementOrder`` directives kubectl sends;
- server-side apply (``application/apply-patch+yaml``): treated as a strategic merge of the applied
  configuration, without field ownership (fields dropped from the configuration are kept).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonpointer

MERGE = "merge"
JSON = "json"
STRATEGIC = "strategic"
APPLY = "apply"

CONTENT_TYPES = {
    "application/merge-patch+json": MERGE,
    "application/json-patch+json": JSON,
    "application/strategic-merge-patch+json": STRATEGIC,
    "application/apply-patch+yaml": APPLY,
}

# Merge keys of the lists that strategic merge patches merge instead of replacing (from the Go types).
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "ownerReferences": "uid",
}
# Lists of scalars whose patch strategy is "merge": a patch adds to them instead of replacing them.
_MERGED_SCALAR_LISTS = {"finalizers"}


class PatchError(ValueError):
    """A patch that cannot be applied; ``malformed`` distinguishes a bad request from a failed one."""

    def __init__(self, message: str, *, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


def patch_type_of(content_type: str | None) -> str | None:
    """The patch flavour for a request's ``Content-Type`` (parameters ignored), or None if unsupported."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    return CONTENT_TYPES.get(media_type)


def apply_patch(target: Mapping[str, Any], patch: Any, patch_type: str) -> dict[str, Any]:
    """Apply a patch of the given flavour to a copy of ``target`` and return the result."""
    if patch_type == JSON:
        return json_patch(target, patch)
    if not isinstance(patch, Mapping):
        raise PatchError(
            f"a {patch_type} patch must be a JSON object, got {type(patch).__name__}", malformed=True
        )
    if patch_type == MERGE:
        return merge_patch(copy.deepcopy(dict(target)), patch)
    return strategic_merge_patch(target, patch)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Mapping[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902 on a copy of ``target``; a failed ``test`` or a missing path raises :class:`PatchError`."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations", malformed=True)
    try:
        result = jsonpatch.JsonPatch(operations).apply(copy.deepcopy(dict(target)))
    except jsonpatch.InvalidJsonPatch as e:
        raise PatchError(f"invalid JSON patch: {e}", malformed=True) from e
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
        raise PatchError(str(e)) from e
    if not isinstance(result, dict):
        raise PatchError("the JSON patch replaced the whole object with a non-object")
    return result


def strategic_merge_patch(target: Any, patch: Mapping[str, Any]) -> Any:
    """A strategic merge patch on a copy of ``target`` (see the module docstring for what is covered)."""
    directive = patch.get("$patch")
    if directive == "replace":
        return _without_directives(patch)
    if directive == "delete":
        return None
    result = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    _apply_list_directives(result, patch)
    retained = patch.get("$retainKeys")
    if isinstance(retained, list):
        result = {key: value for key, value in result.items() if key in retained}
    return result


def _apply_list_directives(result: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/") and isinstance(value, list):
            field = key.split("/", 1)[1]
            result[field] = [item for item in result.get(field) or [] if item not in value]


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    current = current if isinstance(current, list) else []
    if field in _MERGED_SCALAR_LISTS:
        return current + [item for item in patch if item not in current]
    merge_key = _merge_key(field, patch)
    if merge_key is None:
        return [_without_directives(item) for item in patch]
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, Mapping) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(_without_directives(item))
        else:
            merged[index] = strategic_merge_patch(merged[index], item)
    return merged


def _merge_key(field: str, patch: list[Any]) -> str | None:
    if not patch or not all(isinstance(item, Mapping) for item in patch):
        return None
    key = _MERGE_KEYS.get(field)
    if field == "ports":  # container ports merge by containerPort, service ports by port
        key = "containerPort" if all("containerPort" in item for item in patch) else "port"
    if key is None or not all(key in item for item in patch):
        return None
    return key


def _without_directives(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_without_directives(item) for item in value]
    return copy.deepcopy(value)
