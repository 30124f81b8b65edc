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

The picker, not the gateway, decides which endpoint serves; the gateway only reaches it, as the upstream
chart's original-destination cluster does with the one address it is given. The file and the picker learn of a
change apart (a poll here, an informer there), so for a moment the picker can name an endpoint the file does not
list as ready: one that has just become ready (:func:`pool_addresses` lists every selected pod with an address,
ready or not) or one that has just left (:class:`PoolEndpoints` keeps it for ``linger`` seconds). Those are
written ``DRAINING``: Envoy reaches a draining host the picker names, and never draws one when it chooses at
random. Without them, the override found no host and Envoy chose one at random, which in a fleet of precision
variants can be a pod that does not serve the request's model (answered 404).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from ascend_fleet.kube import Kube, KubeError, NotFound
from ascend_fleet.observed import pod_ready

_log = logging.getLogger(__name__)
EDS_TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
REFRESH_SECONDS = 0.25  # how stale the gateway's view may be: well inside the picker's own informer lag
# How long an endpoint that left the pool stays reachable for the picker that still names it: the picker's
# informer learns of a drained or deleted pod within a second or two; the file keeps the address well past that.
LINGER_SECONDS = 30.0


def pool_endpoints(pool: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """``ip:port`` of every target port of every ready, not deleted pod the pool selects, sorted."""
    return sorted(
        address
        for pod, addresses in _selected(pool, pods)
        if not (pod.get("metadata") or {}).get("deletionTimestamp") and pod_ready(dict(pod))
        for address in addresses
    )


def pool_addresses(pool: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """``ip:port`` of every target port of every pod the pool selects that has an address, ready or not,
    sorted: what the picker may name a moment before or after :func:`pool_endpoints` lists it."""
    return sorted(address for _, addresses in _selected(pool, pods) for address in addresses)


def _selected(
    pool: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> Iterator[tuple[Mapping[str, Any], list[str]]]:
    """Each pod the pool's selector matches that has an address, with its ``ip:port`` per target port."""
    spec = pool.get("spec") or {}
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    ports = [p["number"] for p in spec.get("targetPorts") or [] if "number" in p]
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        address = (pod.get("status") or {}).get("podIP")
        if address and all(labels.get(k) == v for k, v in selector.items()):
            yield pod, [f"{address}:{port}" for port in ports]


def envoy_endpoint(address: str, draining: bool = False) -> dict[str, Any]:
    """One of an Envoy cluster's endpoints, from ``host:port``; a draining one is reached only when named."""
    host, _, port = address.rpartition(":")
    endpoint: dict[str, Any] = {
        "endpoint": {"address": {"socket_address": {"address": host, "port_value": int(port)}}}
    }
    if draining:
        endpoint["health_status"] = "DRAINING"
    return endpoint


def eds_document(
    cluster: str, endpoints: Iterable[str], version: int = 0, draining: Iterable[str] = ()
) -> dict[str, Any]:
    """Envoy's discovery response for one cluster's load assignment (what a file-based EDS source holds)."""
    hosts = [envoy_endpoint(address) for address in endpoints]
    hosts += [envoy_endpoint(address, draining=True) for address in draining]
    assignment = {"@type": EDS_TYPE, "cluster_name": cluster, "endpoints": [{"lb_endpoints": hosts}]}
    return {"version_info": str(version), "resources": [assignment]}


def write_eds(
    path: Path, cluster: str, endpoints: Iterable[str], version: int = 0, draining: Iterable[str] = ()
) -> None:
    """Replace ``path`` by a rename, so Envoy never reads half a file."""
    staged = path.with_name(f".{path.name}.tmp")
    staged.write_text(json.dumps(eds_document(cluster, endpoints, version, draining)))
    os.replace(staged, path)


@dataclass(frozen=True)
class Listed:
    """One read of a cluster's endpoints: those to serve, and others a request may still be sent to by name."""

    ready: list[str]
    reachable: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PoolRef:
    """Which InferencePool a gateway routes to, and the API it is read from."""

    kube: Kube
    namespace: str
    name: str


class FollowedEndpoints:
    """Keeps an EDS file of one cluster's endpoints current while the gateway runs: ``read`` gives them, every
    ``interval`` (an API outage or a failed read keeps the last ones). With ``linger``, an endpoint that left
    stays in the file as draining for that many seconds (see the module)."""

    name = "endpoints"

    def __init__(
        self,
        read: Callable[[], list[str]],
        path: Path,
        cluster: str,
        interval: float = REFRESH_SECONDS,
        *,
        linger: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read
        self.path, self.cluster, self.interval = path, cluster, interval
        self.linger, self._clock = linger, clock
        self.endpoints: list[str] = []
        self.draining: list[str] = []
        self._ready_at: dict[str, float] = {}
        self.version = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"endpoints-{cluster}-{path.parent.name}", daemon=True
        )

    def listed(self) -> Listed:
        """What the cluster holds now (``read``'s endpoints, all ready, unless a subclass says more)."""
        return Listed(self.read())

    def refresh(self) -> None:
        """Write the file if the endpoints changed (always, the first time)."""
        listed, now = self.listed(), self._clock()
        for address in listed.ready:
            self._ready_at[address] = now
        self._ready_at = {
            a: at for a, at in self._ready_at.items() if now - at <= self.linger or a in listed.ready
        }
        ready = set(listed.ready)
        draining = sorted((set(listed.reachable) | set(self._ready_at)) - ready)
        if listed.ready != self.endpoints or draining != self.draining or not self.path.exists():
            self.version += 1
            write_eds(self.path, self.cluster, listed.ready, self.version, draining)
            self.endpoints, self.draining = listed.ready, draining

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

    def __init__(
        self,
        pool: PoolRef,
        path: Path,
        cluster: str,
        interval: float = REFRESH_SECONDS,
        *,
        linger: float = LINGER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.namespace, self.pool = pool.kube, pool.namespace, pool.name
        super().__init__(self.read_pool, path, cluster, interval, linger=linger, clock=clock)

    def read_pool(self) -> list[str]:
        """The pool's ready endpoints now, from the API (empty while the pool does not exist)."""
        return self.listed().ready

    def listed(self) -> Listed:
        """The pool's ready endpoints and every other address it selects, from the API."""
        try:
            pool = self.kube.get("InferencePool", self.namespace, self.pool)
        except NotFound:
            return Listed([])
        selector = (pool.get("spec") or {}).get("selector", {}).get("matchLabels") or None
        pods = self.kube.list("Pod", self.namespace, selector)
        return Listed(pool_endpoints(pool, pods), pool_addresses(pool, pods))
