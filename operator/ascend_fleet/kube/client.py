"""A small, dict-in dict-out wrapper over the official client for the kinds the operator touches.

Dicts rather than generated models keep the renderer's output and the API's answers the same
shape. Deletes are idempotent (NotFound is not an error); creates are too unless the caller asks
to hear about AlreadyExists (the reconciler must tell its own earlier write from a foreign object).
Events are aggregated as Kubernetes' recorder does it (:mod:`.events`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ..api import names
from ..api.times import rfc3339
from .events import EventCache, EventKey, Seen

log = logging.getLogger(__name__)
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


KINDS = {
    "Pod": _Kind("", "v1", "pods"),
    "Service": _Kind("", "v1", "services"),
    "Event": _Kind("", "v1", "events"),
    "PodDisruptionBudget": _Kind("policy", "v1", "poddisruptionbudgets"),
    "PodGroup": _Kind(
        "scheduling.volcano.sh", "v1beta1", "podgroups"
    ),  # Volcano gangs (schedulerName: volcano)
    names.KIND: _Kind(names.GROUP, names.VERSION, names.PLURAL),
    # spec.routing.mode inferencePool: the InferencePool, its endpoint picker and the objectives.
    "InferencePool": _Kind("inference.networking.k8s.io", "v1", "inferencepools"),
    "InferenceObjective": _Kind("inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives"),
    "HTTPRoute": _Kind("gateway.networking.k8s.io", "v1", "httproutes"),
    "Deployment": _Kind("apps", "v1", "deployments"),
    "ConfigMap": _Kind("", "v1", "configmaps"),
    "ServiceAccount": _Kind("", "v1", "serviceaccounts"),
    "Role": _Kind("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": _Kind("rbac.authorization.k8s.io", "v1", "rolebindings"),
}


class Kube:
    """Namespaced CRUD by kind name, raw JSON in and out."""

    def __init__(self, api_client: client.ApiClient, user_agent: str = USER_AGENT):
        self.api = api_client
        # Identifies the operator's traffic in API server audit logs (and in the RBAC test).
        self.api.user_agent = user_agent
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
        """The resource path; ``namespace=None`` is the cluster-wide collection (lists only)."""
        k = KINDS[kind]
        base = f"/api/{k.version}" if not k.group else f"/apis/{k.group}/{k.version}"
        path = f"{base}/{k.plural}" if namespace is None else f"{base}/namespaces/{namespace}/{k.plural}"
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
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            if hasattr(self.api, "param_serialize"):
                # kubernetes >= 32 (OpenAPI generator 7): serialize, send, and check the status ourselves.
                request = self.api.param_serialize(
                    method,
                    path,
                    query_params=query or [],
                    header_params=headers,
                    body=body,
                    auth_settings=["BearerToken"],
                )
                response = self.api.call_api(*request)
                data = response.read()
                if not 200 <= response.status <= 299:
                    raise ApiException(http_resp=response)
            else:
                # kubernetes < 32's signature; the type checker sees the installed, newer client.
                response = self.api.call_api(  # type: ignore[call-arg]
                    path,
                    method,
                    query_params=query or [],
                    body=body,
                    header_params=headers,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _return_http_data_only=True,
                )
                data = response.data
        except ApiException as exc:
            raise _error(exc) from None
        return json.loads(data) if data else {}

    def get(self, kind: str, namespace: str, name: str) -> dict:
        return self._call("GET", self._path(kind, namespace, name))

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

    def list(self, kind: str, namespace: str | None, selector: dict[str, str] | None = None) -> list[dict]:
        """Objects of a kind in a namespace, or in every namespace with ``namespace=None``."""
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))] if selector else []
        return self._call("GET", self._path(kind, namespace), query=query).get("items", [])

    def create(self, obj: dict, exist_ok: bool = True) -> dict | None:
        """Create; None when an object of that name exists already, or AlreadyExists with ``exist_ok=False``."""
        meta = obj["metadata"]
        try:
            return self._call("POST", self._path(obj["kind"], meta["namespace"]), body=obj)
        except AlreadyExists:
            if not exist_ok:
                raise
            return None

    def patch(self, kind: str, namespace: str, name: str, body: dict, subresource: str | None = None) -> dict:
        return self._call(
            "PATCH", self._path(kind, namespace, name, subresource), body=body, content_type=MERGE_PATCH
        )

    def delete(self, kind: str, namespace: str, name: str) -> bool:
        """Delete in the background (dependents follow); False when it was already gone."""
        try:
            self._call(
                "DELETE",
                self._path(kind, namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
            return True
        except NotFound:
            return False

    def create_crd(self, crd: dict) -> dict | None:
        """Create a CustomResourceDefinition; None when it exists already."""
        try:
            return self._call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd)
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
            log.warning("could not record event %s on %s: %s", reason, meta["name"], error)


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
