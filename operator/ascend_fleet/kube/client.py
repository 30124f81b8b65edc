"""A small, dict-in dict-out wrapper over the official client for the kinds the operator touches.

Dicts rather than generated models keep the renderer's output and the API's answers the same
shape. Deletes are idempotent (NotFound is not an error); creates are too unless the caller asks
to hear about AlreadyExists (the reconciler must tell its own earlier write from a foreign object).
Events are aggregated as Kubernetes' recorder does it (:mod:`.events`).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ..api import names
from ..api.times import rfc3339
from .events import EventCache, EventKey, Seen
from .wait import wait_for

_log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "ascend-fleet-operator"


class KubeError(Exception):
    """An API error with the server's message."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def refused(self) -> bool:
        """The server judged the request itself (invalid, forbidden, bad request): retrying it unchanged fails again."""
        return self.status in (400, 403, 422)


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class AlreadyExists(Conflict):
    """A create found an object of that name (a 409 whose Status reason is AlreadyExists)."""


def _error(exc: ApiException) -> KubeError:
    message, reason = exc.reason or "", exc.reason or ""
    with contextlib.suppress(ValueError, AttributeError):
        body = json.loads(exc.body or "{}")
        message = body.get("message", message)
        reason = body.get("reason") or reason
    kind = {404: NotFound, 409: Conflict}.get(exc.status or 0, KubeError)
    if kind is Conflict and reason == "AlreadyExists":
        kind = AlreadyExists
    return kind(exc.status or 0, reason, message)


@dataclass(frozen=True)
class _Kind:
    group: str  # "" for core
    version: str
    plural: str
    namespaced: bool = True


@dataclass(frozen=True)
class Request:
    """One request the client sent, as a request hook sees it once the answer (or the failure) is in."""

    method: str
    path: str
    query: list
    body: Any
    status: int  # the HTTP status; 0 when no answer came (a connection error)
    seconds: float


RequestHook = Callable[[Request], None]
DRY_RUN = [("dryRun", "All")]
STRICT = [("fieldValidation", "Strict")]

KINDS = {
    "Pod": _Kind("", "v1", "pods"),
    "Service": _Kind("", "v1", "services"),
    "Event": _Kind("", "v1", "events"),
    "PodDisruptionBudget": _Kind("policy", "v1", "poddisruptionbudgets"),
    "NetworkPolicy": _Kind("networking.k8s.io", "v1", "networkpolicies"),
    "PodGroup": _Kind(
        "scheduling.volcano.sh", "v1beta1", "podgroups"
    ),  # Volcano gangs (schedulerName: volcano)
    names.KIND: _Kind(names.GROUP, names.VERSION, names.PLURAL),
    # spec.routing.mode inferencePool: the InferencePool, its endpoint picker and the objectives.
    "InferencePool": _Kind("inference.networking.k8s.io", "v1", "inferencepools"),
    "InferenceObjective": _Kind("inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives"),
    "InferenceModelRewrite": _Kind("inference.networking.x-k8s.io", "v1alpha2", "inferencemodelrewrites"),
    "HTTPRoute": _Kind("gateway.networking.k8s.io", "v1", "httproutes"),
    "Deployment": _Kind("apps", "v1", "deployments"),
    "Lease": _Kind("coordination.k8s.io", "v1", "leases"),  # leader election among operator replicas
    "ConfigMap": _Kind("", "v1", "configmaps"),
    "ServiceAccount": _Kind("", "v1", "serviceaccounts"),
    "Role": _Kind("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": _Kind("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "ResourceQuota": _Kind("", "v1", "resourcequotas"),
    "PersistentVolumeClaim": _Kind("", "v1", "persistentvolumeclaims"),
    # Cluster-scoped kinds: their paths carry no namespace.
    "Namespace": _Kind("", "v1", "namespaces", namespaced=False),
    "PersistentVolume": _Kind("", "v1", "persistentvolumes", namespaced=False),
    "Node": _Kind("", "v1", "nodes", namespaced=False),
    "CustomResourceDefinition": _Kind(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False
    ),
}


class Kube:
    """CRUD by kind name, raw JSON in and out; ``namespace=None`` for cluster-scoped kinds.

    ``on_request``, when given, observes every request after its answer (benches count and time them).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        user_agent: str = USER_AGENT,
        on_request: RequestHook | None = None,
    ):
        self.api = api_client
        # Identifies the operator's traffic in API server audit logs (and in the RBAC test).
        self.api.user_agent = user_agent
        self.on_request = on_request
        # Called before every request; raises to refuse it (leader election's fence: a lost Lease sends nothing).
        self.fence: Callable[[], None] | None = None
        self.events = EventCache()

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> Kube:
        """Use the kubeconfig (``KUBECONFIG`` or ~/.kube/config), or the in-cluster service account."""
        configuration = client.Configuration()
        try:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        except config.ConfigException:
            if kubeconfig:
                raise
            config.load_incluster_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    def _path(
        self, kind: str, namespace: str | None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The resource path; ``namespace=None`` is the cluster-wide collection, or a cluster-scoped kind."""
        k = KINDS[kind]
        base = f"/api/{k.version}" if not k.group else f"/apis/{k.group}/{k.version}"
        scoped = k.namespaced and namespace is not None
        path = f"{base}/namespaces/{namespace}/{k.plural}" if scoped else f"{base}/{k.plural}"
        if name:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return path

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list | None = None,
        content_type: str = "application/json",
    ) -> dict:
        if self.fence is not None:
            self.fence()
        started, status = time.monotonic(), 0
        try:
            status, data = self._send(method, path, body, query or [], content_type)
        except ApiException as exc:
            status = exc.status or 0
            raise _error(exc) from None
        finally:
            if self.on_request is not None:
                elapsed = time.monotonic() - started
                self.on_request(Request(method, path, query or [], body, status, elapsed))
        return json.loads(data) if data else {}

    def _send(
        self, method: str, path: str, body: Any, query: list, content_type: str
    ) -> tuple[int, bytes | str]:
        """Send one request; the status and the raw answer, or ApiException for a non-2xx answer."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if hasattr(self.api, "param_serialize"):
            # kubernetes >= 32 (OpenAPI generator 7): serialize, send, and check the status ourselves.
            request = self.api.param_serialize(
                method,
                path,
                query_params=query,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(*request)
            data = response.read()
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response)
            return response.status, data
        # kubernetes < 32's signature; the type checker sees the installed, newer client.
        response = self.api.call_api(  # type: ignore[call-arg]
            path,
            method,
            query_params=query,
            body=body,
            header_params=headers,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        return response.status, cast(bytes, response.data)

    def get(self, kind: str, namespace: str | None, name: str, subresource: str | None = None) -> dict:
        """One object, or its ``status``/``scale`` subresource; NotFound when it does not exist."""
        return self._call("GET", self._path(kind, namespace, name, subresource))

    def request_token(self, namespace: str, service_account: str, seconds: int = 86400) -> str:
        """A bound token of ``service_account`` (a TokenRequest), as the kubelet mounts one into a pod."""
        answer = self._call(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return answer["status"]["token"]

    def list(
        self,
        kind: str,
        namespace: str | None,
        selector: dict[str, str] | None = None,
        *,
        cached: bool = False,
    ) -> list[dict]:
        """Objects of a kind in a namespace, or in every namespace with ``namespace=None``; ``cached`` lets the
        API server answer from its watch cache (``resourceVersion=0``) instead of reading etcd."""
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))] if selector else []
        if cached:
            query.append(("resourceVersion", "0"))
        return self._call("GET", self._path(kind, namespace), query=query).get("items", [])

    def create(
        self, obj: dict, exist_ok: bool = True, *, dry_run: bool = False, strict: bool = False
    ) -> dict | None:
        """Create; None when an object of that name exists already, or AlreadyExists with ``exist_ok=False``.

        ``dry_run`` asks the server to admit and default the object without storing it; ``strict``
        makes it refuse unknown or duplicate fields (``fieldValidation=Strict``) instead of dropping them.
        """
        query = (DRY_RUN if dry_run else []) + (STRICT if strict else [])
        meta = obj["metadata"]
        # A namespaced object must name its namespace: None would post to the cluster-wide collection.
        path = self._path(obj["kind"], meta["namespace"] if KINDS[obj["kind"]].namespaced else None)
        try:
            return self._call("POST", path, body=obj, query=query)
        except AlreadyExists:
            if not exist_ok:
                raise
            return None

    def patch(
        self, kind: str, namespace: str | None, name: str, body: dict, subresource: str | None = None
    ) -> dict:
        """Merge-patch an object or its ``status``/``scale`` subresource."""
        return self._call(
            "PATCH", self._path(kind, namespace, name, subresource), body=body, content_type=MERGE_PATCH
        )

    def replace(
        self, kind: str, namespace: str | None, name: str, body: dict, subresource: str | None = None
    ) -> dict:
        """Replace (PUT) an object or its ``status``/``scale`` subresource; Conflict on a stale resourceVersion."""
        return self._call("PUT", self._path(kind, namespace, name, subresource), body=body)

    def delete(self, kind: str, namespace: str | None, name: str, grace_seconds: int | None = None) -> bool:
        """Delete in the background (dependents follow); False when it was already gone. ``grace_seconds=0``
        on a pod removes it at once, without its kubelet's confirmation (a force delete)."""
        options: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        try:
            self._call("DELETE", self._path(kind, namespace, name), body=options)
            return True
        except NotFound:
            return False

    def wait_gone(self, kind: str, namespace: str | None, name: str, timeout: float = 60.0) -> None:
        """Wait until a deleted object is no longer served (a namespace first empties and finalizes)."""

        def gone() -> bool:
            try:
                self.get(kind, namespace, name)
            except NotFound:
                return True
            return False

        wait_for(gone, timeout=timeout, what=f"{kind} {name} to be gone")

    def create_namespace(
        self, name: str, labels: dict[str, str] | None = None, exist_ok: bool = False
    ) -> dict | None:
        """Create a namespace with ``labels``; AlreadyExists unless ``exist_ok`` (then None)."""
        metadata: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
        return self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}, exist_ok=exist_ok)

    def delete_namespace(self, name: str, wait: bool = False, timeout: float = 60.0) -> bool:
        """Delete a namespace and everything in it; with ``wait``, return once it is gone."""
        deleted = self.delete("Namespace", None, name)
        if wait:
            self.wait_gone("Namespace", None, name, timeout)
        return deleted

    def evict(self, namespace: str, pod: str) -> dict:
        """Ask to evict a pod (policy/v1 Eviction), as ``kubectl drain`` does; the PodDisruptionBudgets decide."""
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        return self._call("POST", self._path("Pod", namespace, pod, "eviction"), body=eviction)

    def list_events(self, namespace: str, regarding: dict | None = None) -> builtins.list[dict]:
        """The core/v1 Events of a namespace, or only those about ``regarding`` (matched by kind and name)."""
        events = self.list("Event", namespace)
        if regarding is None:
            return events
        kind, name = regarding["kind"], regarding["metadata"]["name"]
        return [
            e
            for e in events
            if (e.get("involvedObject") or {}).get("kind") == kind
            and (e.get("involvedObject") or {}).get("name") == name
        ]

    def create_crd(self, crd: dict) -> dict | None:
        """Create a CustomResourceDefinition; None when it exists already."""
        try:
            return self._call("POST", self._path("CustomResourceDefinition", None), body=crd)
        except Conflict:
            return None

    def wait_served(self, kind: str, timeout: float = 60.0) -> None:
        """Wait until the API serves ``kind`` (a new CRD's resource is served a moment after it is created,
        once Established); the last KubeError if it is not within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.list(kind, "default")
                return
            except KubeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def event(
        self,
        regarding: dict,
        type_: str,
        reason: str,
        message: str,
        component: str = "ascend-fleet",
        now: float | None = None,
    ) -> None:
        """Record a core/v1 Event about an object, counted up when the same one was recorded recently.

        Failures are logged, never raised: Events are best effort.
        """
        meta = regarding["metadata"]
        namespace = meta.get("namespace", "default")
        message = message[:1024]
        now = time.time() if now is None else now
        key = EventKey(
            component,
            regarding.get("apiVersion") or "",
            regarding.get("kind") or "",
            namespace,
            meta["name"],
            meta.get("uid") or "",
            type_,
            reason,
            message,
        )
        seen = self.events.decide(key, now)
        stamp = rfc3339(now)
        try:
            if seen.patch_name is not None:
                try:
                    self._call(
                        "PATCH",
                        self._path("Event", namespace, seen.patch_name),
                        body={"count": seen.count, "lastTimestamp": stamp},
                        content_type=MERGE_PATCH,
                    )
                    self.events.remember(key, Seen(seen.patch_name, seen.count, seen.first or stamp, now))
                    return
                except NotFound:  # expired (the server's event TTL) or deleted: start a new one
                    self.events.forget(key)
            created = self._call("POST", self._path("Event", namespace), body=_event_body(key, stamp))
            self.events.remember(key, Seen(created["metadata"]["name"], 1, stamp, now))
        except KubeError as error:
            _log.warning("could not record event %s on %s: %s", reason, meta["name"], error)


def _event_body(key: EventKey, stamp: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{key.name}.", "namespace": key.namespace},
        "involvedObject": {
            "apiVersion": key.api_version,
            "kind": key.kind,
            "name": key.name,
            "namespace": key.namespace,
            "uid": key.uid,
        },
        "type": key.type,
        "reason": key.reason,
        "message": key.message,
        "source": {"component": key.component},
        "reportingComponent": key.component,
        "reportingInstance": key.component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
