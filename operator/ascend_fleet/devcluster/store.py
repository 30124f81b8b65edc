"""The object store behind the local Kubernetes API: what a real API server does to objects.

:class:`ObjectStore` keeps the objects in kmock's :class:`kmock.ObjectsArray` (so ``emulator.objects[...]``
still shows every object and its history) and adds the semantics kmock 0.8 lacks:

- ``metadata.resourceVersion`` from one global counter bumped on every write; ``uid``, ``creationTimestamp``,
  ``generation`` (1 on create, +1 when anything but metadata and a status subresource's ``.status`` changes);
- lists and watches with label and field selectors, watches that resume from a resourceVersion (or answer
  410 Expired), emit ``ADDED``/``DELETED`` when an object enters or leaves a selector, and send bookmarks;
- optimistic concurrency (a stale resourceVersion in a PUT or patch is a 409 Conflict), the ``status`` and
  ``scale`` subresources, no-op writes that change nothing (no new resourceVersion, no event);
- deletion with finalizers (``deletionTimestamp`` first, removal when the last finalizer goes), garbage
  collection of dependents by ``ownerReferences`` (background; orphaning on request), namespace deletion
  that deletes the namespace's objects, and CRDs that start (and stop) serving their resources.

Threading: the store belongs to the event loop that serves the API. Its methods are synchronous and never
await, so each call is atomic on that loop; in-process cluster components (the kubelet simulator) call them
directly from the same loop. Nothing here is thread-safe.

Simplifications (documented, deliberate): grace periods are ignored (an object without finalizers goes away
at once); foreground deletion behaves as background; CR objects are neither validated against the CRD's
schema nor pruned; deleting a CRD removes its objects at once, finalizers or not.
"""

from __future__ import annotations

import base64
import collections
import copy
import datetime
import ipaddress
import json
import random
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import kmock

from ascend_fleet.devcluster import errors, patches
from ascend_fleet.devcluster.resources import (
    CRD_RESOURCE,
    NAMESPACES,
    ServedResource,
    apply_schema_defaults,
    builtin,
    crd_problems,
    established_status,
    served_resources,
)
from ascend_fleet.devcluster.selectors import FieldSelector, LabelSelector, SelectorError
from ascend_fleet.devcluster.watches import Change, WatchStream

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
PODS = kmock.resource("", "v1", "pods")
SERVICES = kmock.resource("", "v1", "services")

# Fields of metadata that only the server sets; a client's update never changes them.
_SERVER_METADATA = (
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
_SERVICE_NETWORK = ipaddress.IPv4Address("10.96.0.0")

ResourceRef = kmock.resource | str
Key = tuple[kmock.resource, str | None, str]


def now_timestamp() -> str:
    """The current time in the API's RFC 3339 form (whole seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectStore:
    """Objects of all resources, with the write, read, list, watch and collection semantics of the API."""

    def __init__(
        self,
        objects: kmock.ObjectsArray,
        resources: kmock.ResourcesArray,
        *,
        history_limit: int | None = 10,
        watch_history: int = 1000,
        bookmark_interval: float = 60.0,
    ) -> None:
        """Keep objects in ``objects`` and announce served resources in ``resources`` (kmock's containers).

        ``history_limit`` caps the versions kept per object (kmock keeps all); ``watch_history`` is how many
        changes per resource a watch can resume from; older resourceVersions get 410 Expired.
        """
        self.objects = objects
        self.resources = resources
        self.history_limit = history_limit
        self.bookmark_interval = bookmark_interval
        self.revision = 0
        self._watch_history = watch_history
        self._custom: dict[kmock.resource, ServedResource] = {}
        self._crd_resources: dict[str, list[kmock.resource]] = {}
        self._uids: dict[str, Key] = {}
        # The keys of each resource's objects (deleted ones too, as in ``objects``): a list or a quota
        # check reads one resource's objects, not every stored object (10,000-object benches).
        self._keys: dict[kmock.resource, dict[Key, None]] = collections.defaultdict(dict)
        self._changes: dict[kmock.resource, collections.deque[Change]] = {}
        self._oldest: dict[kmock.resource, int] = {}
        self._watches: dict[kmock.resource, set[WatchStream]] = collections.defaultdict(set)
        self._service_ips = 10
        self._closing = False

    # Resources ------------------------------------------------------------------------------------

    def served(self, resource: ResourceRef) -> ServedResource:
        """What the API serves for a resource (``kmock.resource`` or ``"v1/pods"``); 404 if nothing."""
        resource = resource if isinstance(resource, kmock.resource) else kmock.resource(resource)
        if resource in self._custom:
            return self._custom[resource]
        if resource.plural and resource in self.resources:
            return builtin(resource, self.resources[resource])
        raise errors.not_found("", None)

    def served_all(self) -> list[ServedResource]:
        """Every served resource (built-in and custom), for discovery."""
        # kmock's ResourcesArray yields resources but is typed as a mapping of every key form it accepts.
        return [
            self.served(resource)
            for resource in list(self.resources)
            if isinstance(resource, kmock.resource) and resource.plural
        ]

    def bootstrap(self) -> None:
        """Create the namespaces every cluster has (``default``, ``kube-system``...)."""
        for name in DEFAULT_NAMESPACES:
            self.create_object(NAMESPACES, {"metadata": {"name": name}})

    # Reads ----------------------------------------------------------------------------------------

    def read_object(
        self,
        resource: ResourceRef,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """An object (or its ``status``/``scale`` view); 404 if absent."""
        served = self.served(resource)
        self._check_subresource(served, subresource)
        current = self._current(served, namespace, name)
        if subresource == "scale":
            assert served.scale is not None  # checked above
            return served.scale.scale_of(current)
        return self.present(served, current)

    def list_objects(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        """A ``<Kind>List`` of the matching objects in key order, with the current resourceVersion."""
        served = self.served(resource)
        labels, fields = _selectors(label_selector, field_selector)
        items = [obj for _, obj in self._live(served, namespace) if _selected(obj, labels, fields)]
        metadata: dict[str, Any] = {"resourceVersion": str(self.revision)}
        items, metadata_extra = _paginate(items, limit, continue_token)
        metadata.update(metadata_extra)
        return {
            "apiVersion": served.api_version,
            "kind": served.list_kind_name,
            "metadata": metadata,
            "items": [self.present(served, obj) for obj in items],
        }

    def open_watch(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        name: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str | None = None,
        send_initial_events: bool = False,
        allow_bookmarks: bool = False,
        timeout: float | None = None,
    ) -> WatchStream:
        """Start a watch (validated here, so errors are plain API errors, not stream events).

        Without a ``resource_version`` (or with "0"), the stream starts with ``ADDED`` for every matching
        object; with one, it replays the changes after it, or sends a 410 ``ERROR`` if they are forgotten.
        """
        served = self.served(resource)
        labels, fields = _selectors(label_selector, field_selector)
        stream = WatchStream(
            self,
            served,
            namespace=namespace,
            name=name or fields.value_of("metadata.name"),
            labels=labels,
            fields=fields,
            bookmarks=allow_bookmarks,
            timeout=timeout,
            bookmark_interval=self.bookmark_interval,
        )
        initial = self._initial_events(stream, resource_version, send_initial_events)
        if send_initial_events and allow_bookmarks:
            initial.append(stream.bookmark(initial_events_end=True))
        stream.begin_with(initial)
        self._watches[served.storage].add(stream)
        if self._closing:
            stream.close()
        return stream

    def _initial_events(
        self, stream: WatchStream, resource_version: str | None, send_initial_events: bool
    ) -> list[dict[str, Any]]:
        served = stream.served
        if send_initial_events or resource_version in (None, "", "0"):
            return [
                {"type": "ADDED", "object": self.present(served, obj)}
                for _, obj in self._live(served, None)
                if stream.matches(obj)
            ]
        try:
            since = int(resource_version or "")
        except ValueError as e:
            raise errors.bad_request(f"invalid resourceVersion {resource_version!r}") from e
        if since < self._oldest.get(served.storage, 0):
            status = errors.expired(f"too old resource version: {since} ({self._oldest[served.storage]})")
            return [{"type": "ERROR", "object": errors.status_object(status)}]
        changes = self._changes.get(served.storage, ())
        events = [stream.event_for(change) for change in changes if change.revision > since]
        return [event for event in events if event is not None]

    def forget_watch(self, stream: WatchStream) -> None:
        """Unregister a finished watch."""
        self._watches[stream.served.storage].discard(stream)

    def close_watches(self) -> None:
        """End every watch, now and from now on (server shutdown)."""
        self._closing = True
        for streams in self._watches.values():
            for stream in list(streams):
                stream.close()

    # Writes ---------------------------------------------------------------------------------------

    def create_object(
        self,
        resource: ResourceRef,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create an object (``generateName`` supported); 409 if it exists, 422 if invalid."""
        served = self.served(resource)
        obj = self._new_object(served, body, namespace)
        metadata = obj["metadata"]
        key = self._key(served, metadata.get("namespace"), metadata["name"])
        if self._stored(key) is not None:
            raise errors.already_exists(served.group_resource, metadata["name"], **_details(served))
        self._admit_quota(served, metadata)
        if dry_run:
            return self.present(served, obj)
        stored = self._commit(served, key, obj, "ADDED", None)
        self._after_write(served, None, stored)
        return self.present(served, stored)

    def patch_object(
        self,
        resource: ResourceRef,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = patches.MERGE,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch an object or its ``status``/``scale`` subresource (``patches.MERGE``, ``JSON``, ...)."""
        served = self.served(resource)
        self._check_subresource(served, subresource)
        key = self._key(served, namespace, name)
        current = self._stored(key)
        if current is None and patch_type == patches.APPLY and subresource is None:
            return self._create_applied(served, name, patch, namespace, dry_run)
        if current is None:
            raise errors.not_found(served.group_resource, name, **_details(served))
        if patch_type == patches.STRATEGIC and served.custom:
            # As a real API server: custom resources have no patch strategies to merge by.
            raise errors.unsupported_media_type(
                "application/strategic-merge-patch+json - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            )
        if subresource == "scale":
            assert served.scale is not None  # checked above
            scale = _patched(served.scale.scale_of(current), patch, patch_type)
            return self._write_scale(served, key, current, scale, dry_run)
        desired = _patched(current, patch, patch_type)
        return self.present(
            served, self._update(served, key, current, desired, subresource or "main", dry_run)
        )

    def replace_object(
        self,
        resource: ResourceRef,
        name: str,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace an object (PUT) or its ``status``/``scale``; 409 if its resourceVersion is stale."""
        served = self.served(resource)
        self._check_subresource(served, subresource)
        if not isinstance(body, Mapping) or not isinstance(body.get("metadata", {}), Mapping):
            raise errors.bad_request("the body of a replace must be an object with metadata")
        body_name = body.get("metadata", {}).get("name")
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        key = self._key(served, namespace, name)
        current = self._current(served, namespace, name)
        if subresource == "scale":
            return self._write_scale(served, key, current, dict(body), dry_run)
        return self.present(
            served, self._update(served, key, current, dict(body), subresource or "main", dry_run)
        )

    def modify_object(
        self,
        resource: ResourceRef,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Write an object the way a cluster component does: ``change`` edits a copy of spec and status alike.

        ``change`` may return a new dict or edit its argument in place and return None. Server-owned metadata
        (uid, resourceVersion, ...) is kept; the write has the usual effects (events, generation, finalizers).
        """
        served = self.served(resource)
        key = self._key(served, namespace, name)
        current = self._current(served, namespace, name)
        draft = copy.deepcopy(current)
        desired = change(draft)
        return self.present(
            served, self._update(served, key, current, draft if desired is None else desired, "all", False)
        )

    def delete_object(
        self,
        resource: ResourceRef,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        preconditions: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete an object: with finalizers it only gets a ``deletionTimestamp``; otherwise it goes at once.

        ``propagation`` is ``Background`` (dependents are deleted; ``Foreground`` behaves the same) or
        ``Orphan`` (dependents lose their ownerReference to it).
        """
        served = self.served(resource)
        key = self._key(served, namespace, name)
        current = self._current(served, namespace, name)
        metadata = current["metadata"]
        for field in ("uid", "resourceVersion"):
            expected = (preconditions or {}).get(field)
            if expected and expected != metadata.get(field):
                raise errors.conflict(served.group_resource, name, **_details(served))
        if dry_run:
            return self.present(served, current)
        return self.present(served, self._delete(served, key, current, propagation))

    def delete_collection(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        propagation: str = "Background",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete every matching object (``deletecollection``); returns the list of what was deleted."""
        served = self.served(resource)
        labels, fields = _selectors(label_selector, field_selector)
        selected = [
            (key, obj) for key, obj in self._live(served, namespace) if _selected(obj, labels, fields)
        ]
        deleted = [obj if dry_run else self._delete(served, key, obj, propagation) for key, obj in selected]
        return {
            "apiVersion": served.api_version,
            "kind": served.list_kind_name,
            "metadata": {"resourceVersion": str(self.revision)},
            "items": [self.present(served, obj) for obj in deleted],
        }

    # Internals: objects ---------------------------------------------------------------------------

    def present(self, served: ServedResource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A caller's copy of a stored object, in the API version that was asked for."""
        body = copy.deepcopy(dict(obj))
        body.pop("apiVersion", None)
        return {"apiVersion": served.api_version, "kind": body.pop("kind", served.kind), **body}

    def _admit_quota(self, served: ServedResource, metadata: Mapping[str, Any]) -> None:
        """ResourceQuota admission for the pod count (``spec.hard.pods``), as a real API server refuses.

        Only the count of pods: enough for a namespace that may hold no more pods to refuse the next
        one with the server's 403, which is what the operator's refused-create handling is tested with.
        """
        if served.resource.plural != "pods" or served.resource.group:
            return
        namespace = metadata.get("namespace")
        quotas = [q for _, q in self._live(self.served("v1/resourcequotas"), namespace)]
        if not quotas:
            return
        used = sum(
            1
            for _, pod in self._live(served, namespace)
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        for quota in quotas:
            hard = ((quota.get("spec") or {}).get("hard") or {}).get("pods")
            if hard is not None and used + 1 > int(hard):
                name = quota["metadata"]["name"]
                raise errors.status_error(
                    403,
                    "Forbidden",
                    f'pods "{metadata["name"]}" is forbidden: exceeded quota: {name}, requested: pods=1, '
                    f"used: pods={used}, limited: pods={hard}",
                    name=metadata["name"],
                    kind="pods",
                )

    def _key(self, served: ServedResource, namespace: str | None, name: str) -> Key:
        return (served.storage, namespace if served.namespaced else None, name)

    def _stored(self, key: Key) -> dict[str, Any] | None:
        if key not in self.objects:
            return None
        obj = self.objects[key]
        return None if obj.deleted else obj.last.raw

    def _current(self, served: ServedResource, namespace: str | None, name: str) -> dict[str, Any]:
        current = self._stored(self._key(served, namespace, name))
        if current is None:
            raise errors.not_found(served.group_resource, name, **_details(served))
        return current

    def _live(self, served: ServedResource, namespace: str | None) -> list[tuple[Key, dict[str, Any]]]:
        # Sorted by namespace and name, the order etcd keys give a real API server.
        found = []
        for key in self._keys.get(served.storage, ()):
            obj = self.objects[key]
            if not obj.deleted and (namespace is None or key[1] == namespace):
                found.append((key, obj.last.raw))
        return sorted(found, key=lambda item: (item[0][1] or "", item[0][2]))

    def _all_live(self) -> Iterator[tuple[Key, dict[str, Any]]]:
        for key, obj in list(self.objects.items()):
            if not obj.deleted:
                yield key, obj.last.raw

    def _check_subresource(self, served: ServedResource, subresource: str | None) -> None:
        supported = subresource is None or (
            (subresource == "status" and "status" in served.subresources)
            or (subresource == "scale" and served.scale is not None)
        )
        if not supported:
            raise errors.not_found("", None)

    def _new_object(
        self, served: ServedResource, body: Mapping[str, Any], namespace: str | None
    ) -> dict[str, Any]:
        if not isinstance(body, Mapping) or not isinstance(body.get("metadata", {}), Mapping):
            raise errors.bad_request("the body of a create must be an object with metadata")
        obj = copy.deepcopy(dict(body))
        _check_type(served, obj)
        metadata = obj.setdefault("metadata", {})
        name = metadata.get("name") or _generated_name(metadata.get("generateName"))
        if not name:
            raise errors.invalid(
                served.kind, "", ["metadata.name: Required value: name or generateName is required"]
            )
        problems = _name_problems(served, name) + (
            crd_problems(obj) if served.storage == CRD_RESOURCE else []
        )
        if problems:
            raise errors.invalid(served.kind, name, problems, group=str(served.resource.group))
        for field in _SERVER_METADATA:
            metadata.pop(field, None)
        metadata.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=now_timestamp(), generation=1)
        if served.namespaced:
            metadata["namespace"] = self._namespace_for(
                served, namespace, body.get("metadata", {}).get("namespace")
            )
        if "status" in served.subresources:
            obj.pop("status", None)
        self._apply_defaults(served, obj)
        return obj

    def _namespace_for(
        self, served: ServedResource, url_namespace: str | None, body_namespace: str | None
    ) -> str:
        if url_namespace and body_namespace and url_namespace != body_namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        namespace = url_namespace or body_namespace
        if not namespace:
            raise errors.bad_request(f"{served.group_resource} are namespaced: a namespace is required")
        if self._stored((NAMESPACES, None, namespace)) is None:
            raise errors.not_found("namespaces", namespace, plural="namespaces")
        return namespace

    def _apply_defaults(self, served: ServedResource, obj: dict[str, Any]) -> None:
        # What the API server's strategies fill in on create, for the kinds this project touches.
        if served.storage == PODS:
            spec = obj.setdefault("spec", {})
            for field, value in (
                ("restartPolicy", "Always"),
                ("terminationGracePeriodSeconds", 30),
                ("dnsPolicy", "ClusterFirst"),
                ("schedulerName", "default-scheduler"),
            ):
                spec.setdefault(field, value)
            obj["status"] = {"phase": "Pending"}
        elif served.storage == NAMESPACES:
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            obj["status"] = {"phase": "Active"}
        elif served.storage == SERVICES:
            self._default_service(obj.setdefault("spec", {}))
        elif served.storage == CRD_RESOURCE:
            obj["status"] = established_status(obj, now_timestamp())
        elif served.custom:
            apply_schema_defaults(served.schema, obj)

    def _default_service(self, spec: dict[str, Any]) -> None:
        spec.setdefault("type", "ClusterIP")
        if spec["type"] != "ExternalName" and not spec.get("clusterIP"):
            self._service_ips += 1
            spec["clusterIP"] = str(_SERVICE_NETWORK + self._service_ips)
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])

    def _create_applied(
        self, served: ServedResource, name: str, patch: Any, namespace: str | None, dry_run: bool
    ) -> dict[str, Any]:
        # Server-side apply creates what does not exist yet.
        if not isinstance(patch, Mapping):
            raise errors.bad_request("an apply patch must be an object")
        body = dict(patch)
        body["metadata"] = dict(body.get("metadata") or {}, name=name)
        return self.create_object(served.resource, body, namespace, dry_run=dry_run)

    def _update(
        self,
        served: ServedResource,
        key: Key,
        current: dict[str, Any],
        desired: Any,
        scope: str,
        dry_run: bool,
    ) -> dict[str, Any]:
        """Store ``desired`` as the new state of ``current`` within ``scope`` (main, status or all)."""
        if not isinstance(desired, dict) or not isinstance(desired.get("metadata", {}), Mapping):
            raise errors.unprocessable("the result must be an object with metadata")
        wanted = desired.get("metadata", {}).get("resourceVersion")
        if wanted and str(wanted) != current["metadata"]["resourceVersion"]:
            raise errors.conflict(served.group_resource, key[2], **_details(served))
        new = _merged(served, current, desired, scope)
        if served.custom:
            apply_schema_defaults(served.schema, new)
        if new == current or dry_run:
            return new
        metadata = new["metadata"]
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            stored = self._commit(served, key, new, "DELETED", current)
            self._after_removal(served, stored, "Background")
            return stored
        stored = self._commit(served, key, new, "MODIFIED", current)
        self._after_write(served, current, stored)
        return stored

    def _write_scale(
        self, served: ServedResource, key: Key, current: dict[str, Any], scale: Any, dry_run: bool
    ) -> dict[str, Any]:
        assert served.scale is not None  # only called for resources with a scale subresource
        if not isinstance(scale, Mapping):
            raise errors.bad_request("a Scale must be an object")
        wanted = (scale.get("metadata") or {}).get("resourceVersion")
        if wanted and str(wanted) != current["metadata"]["resourceVersion"]:
            raise errors.conflict(served.group_resource, key[2], **_details(served))
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            problem = f"spec.replicas: Invalid value: {replicas!r}: must be a non-negative integer"
            raise errors.invalid("Scale", key[2], [problem], group="autoscaling")
        desired = served.scale.with_replicas(current, replicas)
        return served.scale.scale_of(self._update(served, key, current, desired, "main", dry_run))

    def _delete(
        self, served: ServedResource, key: Key, current: dict[str, Any], propagation: str
    ) -> dict[str, Any]:
        metadata = current["metadata"]
        if metadata.get("finalizers"):
            if metadata.get("deletionTimestamp"):
                return current
            marked = copy.deepcopy(current)
            marked["metadata"].update(
                deletionTimestamp=now_timestamp(),
                deletionGracePeriodSeconds=0,
                generation=int(metadata.get("generation", 1)) + 1,
            )
            return self._commit(served, key, marked, "MODIFIED", current)
        stored = self._commit(served, key, current, "DELETED", current)
        self._after_removal(served, stored, propagation)
        return stored

    def _commit(
        self,
        served: ServedResource,
        key: Key,
        obj: dict[str, Any],
        event_type: str,
        old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Give ``obj`` the next resourceVersion, store it (or its removal) and tell the watches."""
        self.revision += 1
        final = copy.deepcopy(obj)
        final["metadata"]["resourceVersion"] = str(self.revision)
        uid = final["metadata"]["uid"]
        if event_type == "DELETED":
            self.objects[key].delete()
            self._uids.pop(uid, None)
        else:
            self._store_version(key, final)
            self._uids[uid] = key
        self._record(served.storage, Change(self.revision, event_type, final, old))
        return final

    def _store_version(self, key: Key, obj: dict[str, Any]) -> None:
        if key in self.objects:
            history = self.objects[key]
            history.create(obj)  # kmock's "append a version"; it also revives a soft-deleted object
            if self.history_limit and len(history.history) > self.history_limit:
                del history.history[: -self.history_limit]
        else:
            self.objects[key] = obj
            self._keys[key[0]][key] = None

    def _record(self, storage: kmock.resource, change: Change) -> None:
        changes = self._changes.setdefault(storage, collections.deque(maxlen=self._watch_history))
        if len(changes) == changes.maxlen:
            self._oldest[storage] = changes[0].revision
        changes.append(change)
        for stream in list(self._watches.get(storage, ())):
            stream.push(change)

    # Internals: consequences of writes ------------------------------------------------------------

    def _after_write(self, served: ServedResource, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        if served.storage == CRD_RESOURCE:
            self._serve_crd(new)

    def _after_removal(self, served: ServedResource, removed: dict[str, Any], propagation: str) -> None:
        if served.storage == NAMESPACES:
            self._delete_namespace_contents(removed["metadata"]["name"])
        elif served.storage == CRD_RESOURCE:
            self._unserve_crd(removed)
        self._collect_dependents(removed["metadata"]["uid"], propagation)

    def _collect_dependents(self, owner_uid: str, propagation: str) -> None:
        # The garbage collector: a dependent with no owner left is deleted; one with live owners
        # (or under Orphan propagation) only loses the references to owners that are gone.
        dependents = [
            key
            for key, obj in self._all_live()
            if any(ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences") or [])
        ]
        for key in dependents:
            current = self._stored(key)  # an earlier step of this cascade may have removed it
            served = self._served_storage(key[0])
            if current is None or served is None:
                continue
            references = current["metadata"].get("ownerReferences") or []
            others = [ref for ref in references if ref.get("uid") != owner_uid]
            alive = [ref for ref in others if ref.get("uid") in self._uids]
            if propagation == "Orphan":
                self._set_owner_references(served, key, current, others)
            elif alive:
                self._set_owner_references(served, key, current, alive)
            else:
                self._delete(served, key, current, "Background")

    def _set_owner_references(
        self, served: ServedResource, key: Key, obj: dict[str, Any], references: list[dict[str, Any]]
    ) -> None:
        updated = copy.deepcopy(obj)
        updated["metadata"]["ownerReferences"] = references
        if not references:
            del updated["metadata"]["ownerReferences"]
        self._update(served, key, obj, updated, "all", False)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for key in [key for key, _ in self._all_live() if key[1] == namespace]:
            served = self._served_storage(key[0])
            current = self._stored(key)
            if served is not None and current is not None:
                self._delete(served, key, current, "Background")

    def _served_storage(self, storage: kmock.resource) -> ServedResource | None:
        try:
            return self.served(storage)
        except kmock.KubernetesError:
            return next((s for s in self._custom.values() if s.storage == storage), None)

    def _serve_crd(self, crd: dict[str, Any]) -> None:
        name = crd["metadata"]["name"]
        served = {s.resource: s for s in served_resources(crd)}
        previous = self._crd_resources.get(name, [])
        old_storage = self._custom[previous[0]].storage if previous and previous[0] in self._custom else None
        for resource in previous:
            if resource not in served:
                self._custom.pop(resource, None)
                if resource in self.resources:
                    del self.resources[resource]
        for resource, served_resource in served.items():
            self._custom[resource] = served_resource
            self.resources[resource] = served_resource.info()
        self._crd_resources[name] = list(served)
        new_storage = next(iter(served.values())).storage if served else None
        if old_storage is not None and new_storage is not None and old_storage != new_storage:
            self._move_objects(old_storage, new_storage)

    def _move_objects(self, old: kmock.resource, new: kmock.resource) -> None:
        # A CRD changed its storage version: the objects follow it (as a storage migration would).
        for key, obj in list(self._all_live()):
            if key[0] == old:
                moved = copy.deepcopy(obj)
                moved["apiVersion"] = f"{new.group}/{new.version}"
                del self.objects[key]
                del self._keys[old][key]
                self._store_version((new, key[1], key[2]), moved)
                self._uids[moved["metadata"]["uid"]] = (new, key[1], key[2])

    def _unserve_crd(self, crd: dict[str, Any]) -> None:
        resources = self._crd_resources.pop(crd["metadata"]["name"], [])
        storages = {self._custom[r].storage for r in resources if r in self._custom}
        for storage in storages:
            served = next(s for s in self._custom.values() if s.storage == storage)
            for key, obj in self._live(served, None):
                self._commit(served, key, obj, "DELETED", obj)
            for stream in list(self._watches.get(storage, ())):
                stream.close()
        for resource in resources:
            self._custom.pop(resource, None)
            if resource in self.resources:
                del self.resources[resource]


def _details(served: ServedResource) -> dict[str, str]:
    return {"group": str(served.resource.group), "plural": str(served.resource.plural)}


def _selectors(label_selector: str, field_selector: str) -> tuple[LabelSelector, FieldSelector]:
    try:
        return LabelSelector.parse(label_selector), FieldSelector.parse(field_selector)
    except SelectorError as e:
        raise errors.bad_request(str(e)) from e


def _selected(obj: Mapping[str, Any], labels: LabelSelector, fields: FieldSelector) -> bool:
    return labels.matches(obj.get("metadata", {}).get("labels")) and fields.matches(obj)


def _paginate(
    items: list[dict[str, Any]], limit: int | None, continue_token: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    # Continue tokens carry the last key returned; pages therefore stay consistent with key order.
    if continue_token:
        try:
            after = tuple(json.loads(base64.urlsafe_b64decode(continue_token.encode())))
        except ValueError as e:
            raise errors.bad_request("invalid continue token") from e
        items = [obj for obj in items if _sort_key(obj) > after]
    if not limit or limit <= 0 or len(items) <= limit:
        return items, {}
    page = items[:limit]
    token = base64.urlsafe_b64encode(json.dumps(list(_sort_key(page[-1]))).encode()).decode()
    return page, {"continue": token, "remainingItemCount": len(items) - limit}


def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata", {})
    return (metadata.get("namespace") or "", metadata.get("name", ""))


def _patched(current: Mapping[str, Any], patch: Any, patch_type: str) -> dict[str, Any]:
    try:
        return patches.apply_patch(current, patch, patch_type)
    except patches.PatchError as e:
        raise (errors.bad_request(str(e)) if e.malformed else errors.unprocessable(str(e))) from e


def _merged(
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
    for field in _SERVER_METADATA:
        if field in current["metadata"]:
            metadata[field] = current["metadata"][field]
        else:
            metadata.pop(field, None)
    if scope == "main" and "status" in served.subresources:
        if "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        else:
            new.pop("status", None)
    if _content(served, new) != _content(served, current):
        metadata["generation"] = int(current["metadata"].get("generation", 1)) + 1
    return new


def _content(served: ServedResource, obj: Mapping[str, Any]) -> dict[str, Any]:
    # What `generation` tracks: everything but metadata, and but status when status is a subresource.
    ignored = {"metadata", "status"} if "status" in served.subresources else {"metadata"}
    return {key: value for key, value in obj.items() if key not in ignored}


def _check_type(served: ServedResource, obj: dict[str, Any]) -> None:
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


def _generated_name(prefix: str | None) -> str | None:
    if not prefix:
        return None
    return prefix + "".join(random.choices(_NAME_ALPHABET, k=5))


def _name_problems(served: ServedResource, name: str) -> list[str]:
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
