"""Volcano's PodGroup for one replica (a gang), with the resources of every pod in it (pure).

Volcano admits a PodGroup into its queue only when ``minResources`` fit the queue's share, so the sum must
be what the gang really asks for: every pod's requests (CPU, memory, NPUs, anything else), not NPUs alone,
or a gang enqueues that cannot start. Each pod counts as the scheduler counts it: its containers' requests
(a resource named only in limits is requested at the limit, as the API server defaults it) plus restartable
init containers (sidecars), at least any one ordinary init container, plus the pod's overhead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from ..api import names
from ..api.k8s import parse_quantity

Resources = dict[str, Decimal]
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def container_requests(container: Mapping) -> Resources:
    """What one container requests: its requests, and its limits for resources its requests leave out."""
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(value) for name, value in asked.items()}


def pod_requests(pod: Mapping) -> Resources:
    """The pod's effective requests, as kube-scheduler and Volcano compute them."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        total = _add(total, container_requests(container))
    ordinary: list[Resources] = []
    for init in spec.get("initContainers") or []:
        if init.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            total = _add(total, container_requests(init))
        else:
            ordinary.append(container_requests(init))
    for init in ordinary:  # one at a time, before the containers start: the largest counts
        total = {
            name: max(total.get(name, Decimal(0)), init.get(name, Decimal(0))) for name in {*total, *init}
        }
    overhead = {name: parse_quantity(value) for name, value in (spec.get("overhead") or {}).items()}
    return _add(total, overhead)


def min_resources(pods: Iterable[Mapping]) -> dict[str, str]:
    """The gang's summed requests as Kubernetes quantities, by resource name."""
    total: Resources = {}
    for pod in pods:
        total = _add(total, pod_requests(pod))
    return {name: format_quantity(total[name]) for name in sorted(total) if total[name] > 0}


def format_quantity(value: Decimal) -> str:
    """A quantity in its shortest exact form: ``144Gi``, ``16``, ``500m``."""
    if value == value.to_integral_value():
        whole = int(value)
        for suffix, size in _BINARY:
            if whole >= size and whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return f"{int((value * 10**9).to_integral_value())}n"


def render_pod_group(metadata: dict, pods: list[dict], queue: str | None) -> dict:
    """The PodGroup (``metadata`` given) for one replica's ``pods``, in ``queue`` if one is named."""
    spec: dict = {"minMember": len(pods), "minResources": min_resources(pods)}
    if queue:
        spec["queue"] = queue
    return {
        "apiVersion": names.POD_GROUP_API_VERSION,
        "kind": names.POD_GROUP_KIND,
        "metadata": metadata,
        "spec": spec,
    }


def _add(left: Resources, right: Resources) -> Resources:
    return {name: left.get(name, Decimal(0)) + right.get(name, Decimal(0)) for name in {*left, *right}}
