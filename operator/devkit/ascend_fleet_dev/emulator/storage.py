"""Versioned storage behind the local Kubernetes API: objects, their change log, watches and served CRDs.

:class:`VersionedStorage` plays etcd and the watch cache: it keeps every object in kmock's
:class:`kmock.ObjectsArray` under one global resourceVersion counter, records each change for watches to
resume from, fans changes out to open watches, and serves the resources of established CRDs. The API
semantics on top (writes, deletion, garbage collection) are those of
:class:`~ascend_fleet_dev.emulator.store.ObjectStore`. The same threading rule holds: one event loop,
synchronous methods, nothing thread-safe.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Iterator, Mapping
from typing import Any

import kmock

from ascend_fleet_dev.emulator import errors
from ascend_fleet_dev.emulator.objects import error_details, parse_selectors
from ascend_fleet_dev.emulator.resources import ServedResource, builtin_resource, served_resources
from ascend_fleet_dev.emulator.watches import Change, WatchStream

ResourceRef = kmock.resource | str
Key = tuple[kmock.resource, str | None, str]


class VersionedStorage:
    """Objects of all resources with their versions, change log and watches, and the resources served."""

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

    def served(self, resource: ResourceRef) -> ServedResource:
        """What the API serves for a resource (``kmock.resource`` or ``"v1/pods"``); 404 if nothing."""
        resource = resource if isinstance(resource, kmock.resource) else kmock.resource(resource)
        if resource in self._custom:
            return self._custom[resource]
        if resource.plural and resource in self.resources:
            return builtin_resource(resource, self.resources[resource])
        raise errors.not_found("", None)

    def served_all(self) -> list[ServedResource]:
        """Every served resource (built-in and custom), for discovery."""
        # kmock's ResourcesArray yields resources but is typed as a mapping of every key form it accepts.
        return [
            self.served(resource)
            for resource in list(self.resources)
            if isinstance(resource, kmock.resource) and resource.plural
        ]

    def present(self, served: ServedResource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A caller's copy of a stored object, in the API version that was asked for."""
        body = copy.deepcopy(dict(obj))
        body.pop("apiVersion", None)
        return {"apiVersion": served.api_version, "kind": body.pop("kind", served.kind), **body}

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
        labels, fields = parse_selectors(label_selector, field_selector)
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
            raise errors.not_found(served.group_resource, name, **error_details(served))
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
