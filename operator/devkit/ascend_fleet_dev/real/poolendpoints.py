"""An InferencePool's endpoints for the dev cluster's gateway, as a gateway implementation derives them.

A gateway that implements the Inference Extension (Istio, kgateway, GKE) keeps an upstream cluster of the pool's
endpoints and lets the endpoint picker choose among them: the picker names one endpoint or, with fallbacks, a
list (``ip:port,ip:port``), and Envoy's ``override_host`` load-balancing policy takes the first it knows and,
on a retry, the next. That policy only picks hosts the cluster holds, so the cluster must follow the pool.

:func:`pool_endpoints` is that derivation, pure: every ``podIP:targetPort`` of the pods the pool selects that
are Ready and not being deleted (what an EndpointSlice lists as ready). :class:`PoolEndpoints` keeps a file of
them in Envoy's EDS format current by reading the pool and its pods from the API every ``interval``; Envoy
watches the file's directory and takes each new version, replaced by a rename, as it does any EDS update. (The
dev cluster's pod IPs are loopback addresses, which EndpointSlices refuse, so it reads the pods themselves.)
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from ascend_fleet.kube import Kube, KubeError, NotFound
from ascend_fleet.observed import pod_ready

_log = logging.getLogger(__name__)
EDS_TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
REFRESH_SECONDS = 0.25  # how stale the gateway's view may be: well inside the picker's own informer lag


def pool_endpoints(pool: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """``ip:port`` of every target port of every ready, not deleted pod the pool selects, sorted."""
    spec = pool.get("spec") or {}
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    ports = [p["number"] for p in spec.get("targetPorts") or [] if "number" in p]
    found = []
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        address = (pod.get("status") or {}).get("podIP")
        if not address or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if any(labels.get(k) != v for k, v in selector.items()) or not pod_ready(dict(pod)):
            continue
        found += [f"{address}:{port}" for port in ports]
    return sorted(found)


def envoy_endpoint(address: str) -> dict[str, Any]:
    """One of an Envoy cluster's endpoints, from ``host:port``."""
    host, _, port = address.rpartition(":")
    return {"endpoint": {"address": {"socket_address": {"address": host, "port_value": int(port)}}}}


def eds_document(cluster: str, endpoints: Iterable[str], version: int = 0) -> dict[str, Any]:
    """Envoy's discovery response for one cluster's load assignment (what a file-based EDS source holds)."""
    hosts = [envoy_endpoint(address) for address in endpoints]
    assignment = {"@type": EDS_TYPE, "cluster_name": cluster, "endpoints": [{"lb_endpoints": hosts}]}
    return {"version_info": str(version), "resources": [assignment]}


def write_eds(path: Path, cluster: str, endpoints: Iterable[str], version: int = 0) -> None:
    """Replace ``path`` by a rename, so Envoy never reads half a file."""
    staged = path.with_name(f".{path.name}.tmp")
    staged.write_text(json.dumps(eds_document(cluster, endpoints, version)))
    os.replace(staged, path)


@dataclass(frozen=True)
class PoolRef:
    """Which InferencePool a gateway routes to, and the API it is read from."""

    kube: Kube
    namespace: str
    name: str


class FollowedEndpoints:
    """Keeps an EDS file of one cluster's endpoints current while the gateway runs: ``read`` gives them, every
    ``interval`` (an API outage or a failed read keeps the last ones)."""

    name = "endpoints"

    def __init__(
        self, read: Callable[[], list[str]], path: Path, cluster: str, interval: float = REFRESH_SECONDS
    ) -> None:
        self.read = read
        self.path, self.cluster, self.interval = path, cluster, interval
        self.endpoints: list[str] = []
        self.version = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"endpoints-{cluster}-{path.parent.name}", daemon=True
        )

    def refresh(self) -> None:
        """Write the file if the endpoints changed (always, the first time)."""
        endpoints = self.read()
        if endpoints != self.endpoints or not self.path.exists():
            self.version += 1
            write_eds(self.path, self.cluster, endpoints, self.version)
            self.endpoints = endpoints

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except (KubeError, OSError) as error:  # an API outage: keep the last endpoints, try again
                _log.debug("%s endpoints: %s", self.cluster, error)

    def start(self) -> Self:
        """Write the first version (empty if they cannot be read yet), then follow them."""
        try:
            self.refresh()
        except (KubeError, OSError) as error:
            _log.debug("%s endpoints: %s", self.cluster, error)
            write_eds(self.path, self.cluster, [], self.version)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


class PoolEndpoints(FollowedEndpoints):
    """The EDS file of one InferencePool's endpoints, read from the API (see the module)."""

    def __init__(self, pool: PoolRef, path: Path, cluster: str, interval: float = REFRESH_SECONDS) -> None:
        self.kube, self.namespace, self.pool = pool.kube, pool.namespace, pool.name
        super().__init__(self.read_pool, path, cluster, interval)

    def read_pool(self) -> list[str]:
        """The pool's endpoints now, from the API (empty while the pool does not exist)."""
        try:
            pool = self.kube.get("InferencePool", self.namespace, self.pool)
        except NotFound:
            return []
        selector = (pool.get("spec") or {}).get("selector", {}).get("matchLabels") or None
        return pool_endpoints(pool, self.kube.list("Pod", self.namespace, selector))
