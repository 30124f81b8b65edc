"""Incoming requests of the local Kubernetes API: the Kubernetes meaning of a path, kmock requests, content
negotiation, query parameters and write bodies (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import kmock
import yaml

from ascend_fleet_dev.emulator import errors

# Subresources of a namespace; anything else after /namespaces/<name>/ is a namespaced resource.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True)
class ApiPath:
    """The Kubernetes meaning of a request path (``resource`` is None for paths such as ``/version``)."""

    resource: kmock.resource | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


def parse_api_path(path: str) -> ApiPath:
    """Split ``/api[s]/<group>/<version>/[namespaces/<ns>/]<plural>[/<name>[/<subresource>]]``.

    ``/api/v1/namespaces/<name>/status`` is the namespace's status, while ``/api/v1/namespaces/<ns>/pods``
    lists pods in it: a third segment is a subresource of the namespace only if it is one of its own.
    """
    parts = [part for part in path.split("/") if part]
    version: str | None
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 2 and parts[0] == "apis":
        group, version, rest = parts[1], (parts[2] if len(parts) > 2 else None), parts[3:]
    else:
        return ApiPath()
    if version is None:
        return ApiPath(resource=kmock.resource(group=group))
    namespace = None
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES)
    ):
        namespace, rest = rest[1], rest[2:]
    return ApiPath(
        resource=kmock.resource(group=group, version=version, plural=rest[0] if rest else None),
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else None,
        subresource="/".join(rest[2:]) or None,
    )


def _action(method: str, path: ApiPath, params: Mapping[str, str]) -> kmock.action | None:
    # The same classification kmock makes, so that its DSL (`emulator['list pods']`) keeps working.
    if path.resource is None:
        return None
    if method == "GET" and params.get("watch") in ("true", "1"):
        return kmock.action.WATCH
    if path.name is None:
        return {"GET": kmock.action.LIST, "POST": kmock.action.CREATE}.get(method)
    return {"GET": kmock.action.FETCH, "PATCH": kmock.action.UPDATE, "DELETE": kmock.action.DELETE}.get(
        method
    )


def _decode_body(body: bytes, content_type: str) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        if "yaml" not in content_type:
            return None
    try:
        return yaml.safe_load(body)
    except yaml.YAMLError:
        return None


async def parse_request(raw_request: aiohttp.web.BaseRequest, request_id: int) -> kmock.Request:
    """A kmock request with the Kubernetes parts parsed by :func:`parse_api_path`."""
    body = await raw_request.read()
    path = parse_api_path(raw_request.path)
    params = dict(raw_request.query)
    # A real API server ignores a trailing slash (the official client asks for `/api/v1/`).
    url = raw_request.url.with_path(raw_request.url.path.rstrip("/") or "/", keep_query=True)
    return kmock.Request(
        id=request_id,
        raw_request=raw_request,
        url=url,
        method=raw_request.method,
        params=params,
        headers=dict(raw_request.headers),
        cookies=dict(raw_request.cookies),
        body=body,
        text=body.decode("utf-8", errors="replace"),
        data=_decode_body(body, raw_request.content_type),
        action=_action(raw_request.method, path, params),
        resource=path.resource,
        namespace=path.namespace,
        name=path.name,
        subresource=path.subresource,
    )


def header(request: kmock.Request, name: str) -> str:
    """The value of a request header, matched case-insensitively ("" when absent)."""
    return next((value for key, value in request.headers.items() if key.lower() == name.lower()), "")


def negotiated_form(request: kmock.Request) -> tuple[str | None, str]:
    """What the client's ``Accept`` asks for: ``("Table", "v1")``, ``("PartialObjectMetadata", "v1")``
    (also for ...List) or ``(None, "")`` for plain objects; the first acceptable media range wins."""
    for media_range in header(request, "Accept").split(","):
        media_type, *parameters = (part.strip() for part in media_range.split(";"))
        options = dict(parameter.partition("=")[::2] for parameter in parameters)
        form, group, version = options.get("as"), options.get("g"), options.get("v")
        if form and group == "meta.k8s.io" and version in ("v1", "v1beta1"):
            if form == "Table":
                return "Table", version
            if form in ("PartialObjectMetadata", "PartialObjectMetadataList"):
                return "PartialObjectMetadata", version
        if not form and media_type in ("application/json", "*/*", "application/*"):
            return None, ""
    return None, ""


def bool_param(params: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter as the API server reads it (``true`` or ``1``)."""
    return params.get(name, "").lower() in ("true", "1")


def int_param(params: Mapping[str, str], name: str) -> int | None:
    """An integer query parameter, None when absent; a malformed one is a 400."""
    value = params.get(name)
    if not value:
        return None
    try:
        return int(value)
    except ValueError as e:
        raise errors.bad_request(f"{name} must be an integer, got {value!r}") from e


def is_write(request: kmock.Request) -> bool:
    """Whether the request writes a resource (POST, PUT, PATCH or DELETE on one)."""
    return (
        request.resource is not None
        and request.resource.plural is not None
        and str(request.method.value) in ("POST", "PUT", "PATCH", "DELETE")
    )


def request_body(request: kmock.Request) -> Any:
    """The decoded JSON/YAML object of a write; protobuf is a 415, anything else a 400."""
    if isinstance(request.data, Mapping):
        return request.data
    content_type = header(request, "Content-Type")
    if "json" not in content_type and "yaml" not in content_type and request.body:
        # kubectl's typed generators (`kubectl create deployment`) send protobuf, which is not decoded here.
        raise errors.unsupported_media_type(content_type)
    raise errors.bad_request("the request body must be a JSON object")


def propagation_policy(request: kmock.Request) -> str:
    """The deletion's propagation policy from its query or its DeleteOptions body (default Background)."""
    options = request.data if isinstance(request.data, Mapping) else {}
    policy = request.params.get("propagationPolicy") or options.get("propagationPolicy")
    if policy is None and (
        options.get("orphanDependents") or request.params.get("orphanDependents") == "true"
    ):
        policy = "Orphan"
    if policy not in (None, "Background", "Foreground", "Orphan"):
        raise errors.bad_request(f"unsupported propagationPolicy {policy!r}")
    return policy or "Background"
