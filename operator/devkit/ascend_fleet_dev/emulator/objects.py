"""Pure helpers of the local API's object store: names, types, selectors, pages, patches and updates."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import random
import re
from collections.abc import Mapping
from typing import Any

from ascend_fleet_dev.emulator import errors, patches
from ascend_fleet_dev.emulator.resources import NAMESPACES, ServedResource
from ascend_fleet_dev.emulator.selectors import FieldSelector, LabelSelector, SelectorError

# Fields of metadata that only the server sets; a client's update never changes them.
SERVER_METADATA = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The alphabet of generated name suffixes in Kubernetes (no vowels, no look-alikes).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_timestamp() -> str:
    """The current time in the API's RFC 3339 form (whole seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def error_details(served: ServedResource) -> dict[str, str]:
    """The group and plural an API error about ``served`` names."""
    return {"group": str(served.resource.group), "plural": str(served.resource.plural)}


def parse_selectors(label_selector: str, field_selector: str) -> tuple[LabelSelector, FieldSelector]:
    """Parse a list's or watch's label and field selectors; a malformed one is a 400."""
    try:
        return LabelSelector.parse(label_selector), FieldSelector.parse(field_selector)
    except SelectorError as e:
        raise errors.bad_request(str(e)) from e


def selected(obj: Mapping[str, Any], labels: LabelSelector, fields: FieldSelector) -> bool:
    """Whether an object matches both selectors."""
    return labels.matches(obj.get("metadata", {}).get("labels")) and fields.matches(obj)


def paginate(
    items: list[dict[str, Any]], limit: int | None, continue_token: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One page of ``items`` from ``continue_token`` on, at most ``limit`` long, with its list metadata."""
    # Continue tokens carry the last key returned; pages therefore stay consistent with key order.
    if continue_token:
        try:
            after = tuple(json.loads(base64.urlsafe_b64decode(continue_token.encode())))
        except ValueError as e:
            raise errors.bad_request("invalid continue token") from e
        items = [obj for obj in items if sort_key(obj) > after]
    if not limit or limit <= 0 or len(items) <= limit:
        return items, {}
    page = items[:limit]
    token = base64.urlsafe_b64encode(json.dumps(list(sort_key(page[-1]))).encode()).decode()
    return page, {"continue": token, "remainingItemCount": len(items) - limit}


def sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """An object's place in key order: namespace, then name."""
    metadata = obj.get("metadata", {})
    return (metadata.get("namespace") or "", metadata.get("name", ""))


def patched(current: Mapping[str, Any], patch: Any, patch_type: str) -> dict[str, Any]:
    """``current`` with ``patch`` applied; a malformed patch is a 400, one that cannot apply a 422."""
    try:
        return patches.apply_patch(current, patch, patch_type)
    except patches.PatchError as e:
        raise (errors.bad_request(str(e)) if e.malformed else errors.unprocessable(str(e))) from e


def merged(
    served: ServedResource, current: dict[str, Any], desired: dict[str, Any], scope: str
) -> dict[str, Any]:
    """The object an update stores: only ``.status`` for the status subresource, never server metadata."""
    if scope == "status":
        new = copy.deepcopy(current)
        if "status" in desired:
            new["status"] = copy.deepcopy(desired["status"])
        else:
            new.pop("status", None)
        return new
    new = copy.deepcopy(desired)
    new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
    metadata = new.setdefault("metadata", {})
    for field in SERVER_METADATA:
        if field in current["metadata"]:
            metadata[field] = current["metadata"][field]
        else:
            metadata.pop(field, None)
    if scope == "main" and "status" in served.subresources:
        if "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        else:
            new.pop("status", None)
    if generation_content(served, new) != generation_content(served, current):
        metadata["generation"] = int(current["metadata"].get("generation", 1)) + 1
    return new


def generation_content(served: ServedResource, obj: Mapping[str, Any]) -> dict[str, Any]:
    """What ``generation`` tracks: everything but metadata, and but status when status is a subresource."""
    ignored = {"metadata", "status"} if "status" in served.subresources else {"metadata"}
    return {key: value for key, value in obj.items() if key not in ignored}


def check_type(served: ServedResource, obj: dict[str, Any]) -> None:
    """Refuse a body whose apiVersion or kind is not the resource's; stamp the storage version and kind."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version and api_version != served.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match "
            f"the expected API version ({served.api_version})"
        )
    if kind and kind != served.kind:
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({served.kind})"
        )
    obj["apiVersion"] = served.storage_api_version
    obj["kind"] = served.kind


def generated_name(prefix: str | None) -> str | None:
    """A name from ``generateName``: the prefix and five random characters (None without a prefix)."""
    if not prefix:
        return None
    return prefix + "".join(random.choices(_NAME_ALPHABET, k=5))


def name_problems(served: ServedResource, name: str) -> list[str]:
    """Why ``name`` is not a valid name for the resource (empty when it is)."""
    if served.storage == NAMESPACES and (len(name) > 63 or not _DNS_LABEL.match(name)):
        return [
            f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 label must consist of lower case "
            "alphanumeric characters or '-', and must start and end with an alphanumeric character"
        ]
    if name in (".", "..") or "/" in name or "%" in name or len(name) > 253:
        return [
            f"metadata.name: Invalid value: {name!r}: may not be '.' or '..', contain '/' or '%', "
            "or be longer than 253 characters"
        ]
    return []
