"""``LocalKubernetes``: kmock's :class:`kmock.KubernetesEmulator` made to behave like a real API server.

It is the one compatibility layer over kmock 0.8 (pinned, because it adapts kmock's internals): the same
emulator, DSL and fault injection (``emulator['patch pods'] << 500``), with these gaps closed:

- the request path parser knows ``/api/v1/namespaces[/name[/status]]`` (kmock's crashes on it with a 500);
- core-group discovery answers ``groupVersion: "v1"``; discovery lists ``status``/``scale`` subresources with
  their real verbs (and ``autoscaling/v1 Scale``, which ``kubectl scale`` needs); the preferred version of a
  group is the most stable one;
- writes, reads, lists and watches go through :class:`~ascend_fleet_dev.emulator.store.ObjectStore`
  (resourceVersions, uids, generations, selectors, PUT, subresources, finalizers, garbage collection, CRDs);
- ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` (``kubectl get``) gets a ``Table`` with the CRD's
  printer columns, and ``as=PartialObjectMetadata[List]`` gets metadata only;
- API errors are ``v1 Status`` bodies with the real reasons (NotFound, AlreadyExists, Conflict, Invalid...);
- requests are routed directly (kmock's reaction matching costs more with every request served); reactions
  that users add still take precedence, by kmock's rules.

Kubernetes clients receive JSON; protobuf is never offered. Everything runs on the event loop that serves
the HTTP requests; see :mod:`ascend_fleet_dev.emulator.store` for the threading rule.
"""

from __future__ import annotations

import json
import logging
import math
import traceback
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering  # StreamingError: how kmock signals a failure mid-stream

from ascend_fleet_dev.emulator import errors, patches, tables
from ascend_fleet_dev.emulator.request import (
    bool_param,
    header,
    int_param,
    is_write,
    negotiated_form,
    parse_request,
    propagation_policy,
    request_body,
)
from ascend_fleet_dev.emulator.resources import ServedResource, preferred_version, version_priority
from ascend_fleet_dev.emulator.store import ObjectStore
from ascend_fleet_dev.emulator.watches import WatchStream

_log = logging.getLogger(__name__)

_SUBRESOURCE_VERBS = ["get", "patch", "update"]
# The release of the real control plane (tools/controlplane); a test of what a client does with an older
# server's version (Helm's kubeVersion check) sets another with ``kube_version``.
KUBE_VERSION = "1.34.4"
_SERVER_VERSION = {
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "",
    "compiler": "kmock",
    "platform": "linux/amd64",
}


@attrs.define(kw_only=True)
class LocalKubernetes(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with a real API server's semantics (see the module docstring).

    ``store`` is the in-process API (for cluster components on the same loop); ``history_limit`` caps the
    versions kept per object in ``objects``; ``request_log_limit`` caps the requests kept for assertions
    (unbounded by default, like kmock, which suits tests but not a server left running for hours);
    ``kube_version`` is the release ``/version`` reports (what it serves stays 1.34's).
    """

    kube_version: str = KUBE_VERSION
    history_limit: int | None = 10
    watch_history: int = 1000
    bookmark_interval: float = 60.0
    request_log_limit: int | None = None
    store: ObjectStore = attrs.field(init=False)
    _outcomes: dict[kmock.Request, Any] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # kmock's built-in fallback reactions are replaced by `_route`: kmock finds a reaction by iterating
        # every request recorded so far, which makes each request slower than the last. Reactions that users
        # add (fault injection, canned answers) still go through kmock's matching, and before `_route`.
        self._payloads.clear()
        with warnings.catch_warnings():  # kmock 0.8 reads its data with a deprecated importlib call
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resources.load_bundled()  # without the built-ins, kopf waits forever for namespaces and CRDs
        self.store = ObjectStore(
            self.objects,
            self.resources,
            history_limit=self.history_limit,
            watch_history=self.watch_history,
            bookmark_interval=self.bookmark_interval,
        )
        self.store.bootstrap()

    def served_requests(self) -> list[kmock.Request]:
        """The requests served so far, oldest first (the newest ``request_log_limit`` when it is set)."""
        return list(self._requests)

    def close_watches(self) -> None:
        """End every open watch (and any later one) so that the server can shut down at once."""
        self.store.close_watches()

    # HTTP entry point -----------------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Serve one HTTP request: kmock's entry point with this module's path parser.

        API errors (4xx) are answers, not faults: unlike kmock, they are not collected in ``errors``.
        """
        raw_response: aiohttp.web.StreamResponse | None = None
        try:
            if self.limit is not None and len(self._requests) >= self.limit:
                raise kmock.KMockError("Too many requests have been served so far.")
            request = await parse_request(raw_request, len(self._requests))
            self._remember(request)
            try:
                return await self._handle(request)
            except rendering.StreamingError as e:
                raw_response = e.args[0]
                raise (e.__cause__ or e) from None
        except kmock.KubernetesError as e:
            return await self._answer_error(e, raw_response)
        except Exception as e:
            _log.exception(
                "The local Kubernetes API failed to serve %s %s", raw_request.method, raw_request.path
            )
            if not self._errors:
                raise
            self._errors[-1].append(e)
            return await self._answer_error(e, raw_response)

    def _remember(self, request: kmock.Request) -> None:
        self._requests.append(request)
        if self.request_log_limit is not None and len(self._requests) > self.request_log_limit:
            del self._requests[: -self.request_log_limit]

    async def _answer_error(
        self, exc: Exception, raw_response: aiohttp.web.StreamResponse | None
    ) -> aiohttp.web.StreamResponse:
        if raw_response is None or not raw_response.prepared:
            return await self._render_error(exc)
        await self._stream_error(exc, raw_response)
        await raw_response.write_eof()
        return raw_response

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        status = _as_status(exc)
        return aiohttp.web.json_response(status, status=status["code"])

    async def _stream_error(self, exc: Exception, raw_response: aiohttp.web.StreamResponse) -> None:
        event = {"type": "ERROR", "object": _as_status(exc)}
        await raw_response.write(json.dumps(event).encode() + b"\n")

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # Writes are committed before any reaction, as kmock does: a reaction that replaces the answer
        # (fault injection) still leaves the write done ("committed, response lost").
        if is_write(request):
            self._outcomes[request] = self._write(request)
        try:
            response = await self._react(request, fallbacks=False)
            if response is not None:
                return response
            handler = self._route(request)
            if handler is not None:
                return await kmock.Response(payload=handler)(request)
            response = await self._react(request, fallbacks=True)
            if response is not None:
                return response
            raise errors.not_found("", None)
        finally:
            self._outcomes.pop(request, None)

    async def _react(self, request: kmock.Request, *, fallbacks: bool) -> aiohttp.web.StreamResponse | None:
        """The answer of the first user-defined reaction that takes the request, by kmock's rules.

        ``fallbacks`` selects the reactions of fallback priority (``emulator.fallback[...] << ...``): they
        answer only what :meth:`_route` does not know, as kmock's own fallbacks would have come first.
        """
        for payload in _by_priority(self._payloads):
            if _is_fallback(payload) != fallbacks or payload._disabled.is_set():
                continue
            if request in payload._source:
                try:
                    return await payload(request)
                except rendering.ReactionMismatchError:  # the reaction is depleted
                    payload._disabled.set()
                except NotImplementedError:  # it only records requests (a side effect, no answer)
                    pass
        return None

    def _route(self, request: kmock.Request) -> Callable[[kmock.Request], Awaitable[Any]] | None:
        """What serves a request that no user reaction took; None for unknown endpoints."""
        resource, method = request.resource, str(request.method.value)
        if request in self._outcomes:
            return self._serve_outcome
        if method != "GET":
            return None
        if resource is None:
            paths = {
                "/": self._serve_root,
                "/api": self._serve_api,
                "/apis": self._serve_apis,
                "/version": self._serve_server_version,
            }
            return paths.get(request.url.path)
        if resource.version is None:
            return self._serve_group
        if resource.plural is None:
            return self._serve_version
        actions = {
            kmock.action.WATCH: self._serve_watch,
            kmock.action.LIST: self._serve_list,
            kmock.action.FETCH: self._serve_fetch,
        }
        return actions.get(request.action) if request.action is not None else None

    # Writes ---------------------------------------------------------------------------------------

    def _write(self, request: kmock.Request) -> Any:
        served = self._served(request)
        params, method, name = request.params, str(request.method.value), request.name
        dry_run = params.get("dryRun") == "All"
        if method == "POST" and name is None:
            created = self.store.create_object(
                served.resource, request_body(request), request.namespace, dry_run=dry_run
            )
            return kmock.Response(status=201, payload=created)
        if method == "DELETE" and name is None:
            return self.store.delete_collection(
                served.resource,
                request.namespace,
                label_selector=params.get("labelSelector", ""),
                field_selector=params.get("fieldSelector", ""),
                propagation=propagation_policy(request),
                dry_run=dry_run,
            )
        if method == "PATCH" and name is not None:
            return self._patch(request, served, name, dry_run)
        if method == "PUT" and name is not None:
            return self.store.replace_object(
                served.resource,
                name,
                request_body(request),
                request.namespace,
                subresource=request.subresource,
                dry_run=dry_run,
            )
        if method == "DELETE" and name is not None and request.subresource is None:
            options = request.data if isinstance(request.data, Mapping) else {}
            return self.store.delete_object(
                served.resource,
                name,
                request.namespace,
                propagation=propagation_policy(request),
                preconditions=options.get("preconditions"),
                dry_run=dry_run,
            )
        raise errors.method_not_allowed(f"{method} is not supported on {request.url.path}")

    def _patch(self, request: kmock.Request, served: ServedResource, name: str, dry_run: bool) -> Any:
        content_type = header(request, "Content-Type")
        patch_type = patches.patch_type_of(content_type)
        if patch_type is None:
            raise errors.unsupported_media_type(content_type)
        if request.data is None:
            raise errors.bad_request("the patch is not valid JSON")
        return self.store.patch_object(
            served.resource,
            name,
            request.data,
            request.namespace,
            patch_type=patch_type,
            subresource=request.subresource,
            dry_run=dry_run,
        )

    def _served(self, request: kmock.Request) -> ServedResource:
        assert request.resource is not None  # only API requests get here
        served = self.store.served(request.resource)
        if request.namespace is not None and not served.namespaced:
            raise errors.not_found("", None)
        return served

    async def _serve_outcome(self, request: kmock.Request) -> Any:
        return self._outcomes[request]

    # Reads ----------------------------------------------------------------------------------------

    async def _serve_fetch(self, request: kmock.Request) -> Any:
        served = self._served(request)
        assert request.name is not None  # a fetch has a name by definition
        obj = self.store.read_object(
            served.resource, request.name, request.namespace, subresource=request.subresource
        )
        form, version = negotiated_form(request)
        if form == "Table" and request.subresource is None:
            return tables.build_table(
                [obj],
                served.columns,
                version=version,
                resource_version=str(self.store.revision),
                include_object=request.params.get("includeObject", "Metadata"),
            )
        if form == "PartialObjectMetadata":
            return tables.partial_object_metadata(obj)
        return obj

    async def _serve_list(self, request: kmock.Request) -> Any:
        served = self._served(request)
        params = request.params
        listing = self.store.list_objects(
            served.resource,
            request.namespace,
            label_selector=params.get("labelSelector", ""),
            field_selector=params.get("fieldSelector", ""),
            limit=int_param(params, "limit"),
            continue_token=params.get("continue"),
        )
        form, version = negotiated_form(request)
        if form == "Table":
            table = tables.build_table(
                listing["items"],
                served.columns,
                version=version,
                resource_version=listing["metadata"]["resourceVersion"],
                include_object=params.get("includeObject", "Metadata"),
            )
            table["metadata"] = listing["metadata"]
            return table
        if form == "PartialObjectMetadata":
            return {
                "kind": "PartialObjectMetadataList",
                "apiVersion": f"meta.k8s.io/{version}",
                "metadata": listing["metadata"],
                "items": [tables.partial_object_metadata(obj) for obj in listing["items"]],
            }
        return listing

    # kmock registers this method as the WATCH reaction, which may answer with a whole Response; its own
    # version is an async generator of payloads, which is all the base class's annotation allows.
    async def _serve_watch(self, request: kmock.Request) -> kmock.Response:  # type: ignore[override]
        served = self._served(request)
        params = request.params
        stream = self.store.open_watch(
            served.resource,
            request.namespace,
            name=request.name,
            label_selector=params.get("labelSelector", ""),
            field_selector=params.get("fieldSelector", ""),
            resource_version=params.get("resourceVersion"),
            send_initial_events=bool_param(params, "sendInitialEvents"),
            allow_bookmarks=bool_param(params, "allowWatchBookmarks"),
            timeout=int_param(params, "timeoutSeconds"),
        )
        form, version = negotiated_form(request)
        headers = {"Content-Type": "application/json"}
        return kmock.Response(headers=headers, payload=_watch_events(stream, served, form, version))

    # Discovery ------------------------------------------------------------------------------------

    async def _serve_server_version(self, request: kmock.Request) -> Any:
        major, minor, _ = self.kube_version.split(".", 2)
        return {
            "major": major,
            "minor": minor,
            "gitVersion": f"v{self.kube_version}-ascend-fleet-dev",
        } | dict(_SERVER_VERSION)

    async def _serve_apis(self, request: kmock.Request) -> Any:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(self._groups().values())}

    async def _serve_group(self, request: kmock.Request) -> Any:
        assert request.resource is not None  # routed here by the path
        group = self._groups().get(str(request.resource.group))
        if group is None:
            raise errors.not_found("", None)
        return {"kind": "APIGroup", "apiVersion": "v1", **group}

    def _groups(self) -> dict[str, dict[str, Any]]:
        versions: dict[str, set[str]] = {}
        for served in self.store.served_all():
            if served.resource.group:
                versions.setdefault(str(served.resource.group), set()).add(str(served.resource.version))
        return {
            group: {
                "name": group,
                "versions": [
                    _group_version(group, version) for version in sorted(found, key=version_priority)
                ],
                "preferredVersion": _group_version(group, preferred_version(found)),
            }
            for group, found in sorted(versions.items())
        }

    async def _serve_version(self, request: kmock.Request) -> Any:
        assert request.resource is not None  # routed here by the path
        group, version = str(request.resource.group), str(request.resource.version)
        served = [
            s for s in self.store.served_all() if s.resource.group == group and s.resource.version == version
        ]
        if not served and group:
            raise errors.not_found("", None)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,  # kmock says "/v1" for the core group
            "resources": [
                entry for s in sorted(served, key=lambda s: str(s.resource.plural)) for entry in _discovery(s)
            ],
        }


def _is_fallback(payload: Any) -> bool:
    priorities = payload.priorities
    return bool(priorities) and priorities[0] == -math.inf


def _by_priority(payloads: list[Any]) -> list[Any]:
    # kmock's order: higher priorities first, compared element-wise with missing levels as 0; stable.
    depth = max((len(payload.priorities) for payload in payloads), default=0)
    return sorted(
        payloads, key=lambda p: tuple(-x for x in p.priorities) + (0,) * (depth - len(p.priorities))
    )


def _as_status(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, kmock.KubernetesError):
        return errors.status_object(exc)
    # An unexpected failure of this server: say what it was, as a real server's 500 would.
    message = "".join(traceback.format_exception_only(exc)).strip()
    return errors.status_object(errors.status_error(500, "InternalError", message))


async def _watch_events(
    stream: WatchStream, served: ServedResource, form: str | None, version: str
) -> AsyncIterator[Any]:
    # An empty first chunk sends the headers at once: clients wait for them before reading events.
    yield b""
    async for event in stream:
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            event = {"type": event["type"], "object": _watched_object(event["object"], served, form, version)}
        yield event


def _watched_object(
    obj: dict[str, Any], served: ServedResource, form: str | None, version: str
) -> dict[str, Any]:
    if form == "Table":
        return tables.build_table(
            [obj], served.columns, version=version, resource_version=obj["metadata"]["resourceVersion"]
        )
    if form == "PartialObjectMetadata":
        return tables.partial_object_metadata(obj)
    return obj


def _group_version(group: str, version: str) -> dict[str, str]:
    return {"groupVersion": f"{group}/{version}", "version": version}


def _discovery(served: ServedResource) -> list[dict[str, Any]]:
    """The APIResource entries of a resource and its working subresources."""
    main = {
        "name": served.resource.plural,
        "singularName": served.singular or served.kind.lower(),
        "namespaced": served.namespaced,
        "kind": served.kind,
        "verbs": sorted(served.verbs),
    }
    if served.short_names:
        main["shortNames"] = sorted(served.short_names)
    if served.categories:
        main["categories"] = sorted(served.categories)
    entries = [main]
    if "status" in served.subresources:
        entries.append(
            {
                "name": f"{served.resource.plural}/status",
                "singularName": "",
                "namespaced": served.namespaced,
                "kind": served.kind,
                "verbs": _SUBRESOURCE_VERBS,
            }
        )
    if served.scale is not None:
        entries.append(
            {
                "name": f"{served.resource.plural}/scale",
                "singularName": "",
                "namespaced": served.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": _SUBRESOURCE_VERBS,
            }
        )
    return entries
