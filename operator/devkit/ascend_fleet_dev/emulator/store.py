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

import copy
import ipaddress
import uuid
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import kmock

from ascend_fleet_dev.emulator import errors, patches
from ascend_fleet_dev.emulator.objects import (
    SERVER_METADATA,
    check_type,
    error_details,
    generated_name,
    merged,
    name_problems,
    now_timestamp,
    paginate,
    parse_selectors,
    patched,
    selected,
)
from ascend_fleet_dev.emulator.resources import (
    CRD_RESOURCE,
    NAMESPACES,
    ServedResource,
    apply_schema_defaults,
    crd_problems,
    established_status,
)
from ascend_fleet_dev.emulator.storage import Key, ResourceRef, VersionedStorage

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
PODS = kmock.resource("", "v1", "pods")
SERVICES = kmock.resource("", "v1", "services")
_SERVICE_NETWORK = ipaddress.IPv4Address("10.96.0.0")

__all__ = ["DEFAULT_NAMESPACES", "PODS", "SERVICES", "Key", "ObjectStore", "ResourceRef", "now_timestamp"]


class ObjectStore(VersionedStorage):
    """Objects of all resources, with the write, read, list, watch and collection semantics of the API."""

    # What every call raises when the API would refuse (kmock renders it as a ``Status``): a missing object, a
    # conflict, an invalid body. Named here so a caller in another wing (the simulated kubelet) catches it
    # without importing kmock.
    api_error: ClassVar[type[kmock.KubernetesError]] = kmock.KubernetesError

    def bootstrap(self) -> None:
        """Create the namespaces every cluster has (``default``, ``kube-system``...)."""
        for name in DEFAULT_NAMESPACES:
            self.create_object(NAMESPACES, {"metadata": {"name": name}})

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
        labels, fields = parse_selectors(label_selector, field_selector)
        items = [obj for _, obj in self._live(served, namespace) if selected(obj, labels, fields)]
        metadata: dict[str, Any] = {"resourceVersion": str(self.revision)}
        items, metadata_extra = paginate(items, limit, continue_token)
        metadata.update(metadata_extra)
        return {
            "apiVersion": served.api_version,
            "kind": served.list_kind_name,
            "metadata": metadata,
            "items": [self.present(served, obj) for obj in items],
        }

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
            raise errors.already_exists(served.group_resource, metadata["name"], **error_details(served))
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
            raise errors.not_found(served.group_resource, name, **error_details(served))
        if patch_type == patches.STRATEGIC and served.custom:
            # As a real API server: custom resources have no patch strategies to merge by.
            raise errors.unsupported_media_type(
                "application/strategic-merge-patch+json - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            )
        if subresource == "scale":
            assert served.scale is not None  # checked above
            scale = patched(served.scale.scale_of(current), patch, patch_type)
            return self._write_scale(served, key, current, scale, dry_run)
        desired = patched(current, patch, patch_type)
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
                raise errors.conflict(served.group_resource, name, **error_details(served))
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
        labels, fields = parse_selectors(label_selector, field_selector)
        selected = [(key, obj) for key, obj in self._live(served, namespace) if selected(obj, labels, fields)]
        deleted = [obj if dry_run else self._delete(served, key, obj, propagation) for key, obj in selected]
        return {
            "apiVersion": served.api_version,
            "kind": served.list_kind_name,
            "metadata": {"resourceVersion": str(self.revision)},
            "items": [self.present(served, obj) for obj in deleted],
        }

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
        check_type(served, obj)
        metadata = obj.setdefault("metadata", {})
        name = metadata.get("name") or generated_name(metadata.get("generateName"))
        if not name:
            raise errors.invalid(
                served.kind, "", ["metadata.name: Required value: name or generateName is required"]
            )
        problems = name_problems(served, name) + (crd_problems(obj) if served.storage == CRD_RESOURCE else [])
        if problems:
            raise errors.invalid(served.kind, name, problems, group=str(served.resource.group))
        for field in SERVER_METADATA:
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
            raise errors.conflict(served.group_resource, key[2], **error_details(served))
        new = merged(served, current, desired, scope)
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
            raise errors.conflict(served.group_resource, key[2], **error_details(served))
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
