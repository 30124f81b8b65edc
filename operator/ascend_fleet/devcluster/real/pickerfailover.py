"""The leading endpoint picker's death, timed as a gateway in front of two pickers lives through it.

Two picker pods of one pool elect a leader through a Lease; only the leader serves. :func:`kill_leading_picker`
sends SIGKILL to the leader's process, which leaves its Lease unreleased, and times, through
:meth:`~ascend_fleet.devcluster.real.localpods.LocalPods.route` (the picker that leads, as a gateway follows the
picker Service's Ready endpoint), until another picker leads. The floor is the Lease's duration less the age
of its last renewal at the kill: no standby may take a Lease before it expires.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ascend_fleet.api.times import parse_rfc3339
from ascend_fleet.devcluster.real.localpods import LocalPods, Route
from ascend_fleet.kube import Kube, wait_for

_POLL_SECONDS = 0.2


def lease_name(namespace: str, pool: str) -> str:
    """The picker's leader Lease, named by the picker after its pool."""
    return f"epp-{namespace}-{pool}.gateway-api-inference-extension.sigs.k8s.io"


@dataclass(frozen=True)
class PickerFailover:
    killed: Route  # the leader whose process was killed
    leader: Route  # the picker leading afterwards
    seconds: float  # from the kill until ``leader`` leads
    floor: float  # the Lease's duration less its renewal's age at the kill
    holder_before: str
    holder_after: str


def pool_routes(pickers: LocalPods, namespace: str, pool: str) -> list[Route]:
    return [r for r in pickers.routes() if (r.namespace, r.pool) == (namespace, pool)]


def kill_leading_picker(
    pickers: LocalPods, kube: Kube, namespace: str, pool: str, timeout: float = 60.0
) -> PickerFailover:
    """SIGKILL the leading picker of ``pool`` and wait until another one leads."""
    leader = pickers.route(namespace, pool)
    if leader is None or len(pool_routes(pickers, namespace, pool)) < 2:
        raise RuntimeError(f"{namespace}/{pool} has no leading picker with a standby beside it")
    lease = kube.get("Lease", namespace, lease_name(namespace, pool))["spec"]
    renewed = parse_rfc3339(lease.get("renewTime")) or time.time()
    floor = max(float(lease["leaseDurationSeconds"]) - (time.time() - renewed), 0.0)
    killed = time.monotonic()
    for process in pickers.programs(namespace, leader.picker):
        if process.name == "epp":
            process.kill()

    def standby_leads() -> Route | None:
        route = pickers.route(namespace, pool)
        return route if route is not None and route.picker != leader.picker else None

    after = wait_for(standby_leads, timeout, "a standby picker leading", interval=_POLL_SECONDS)
    assert after is not None  # wait_for returns only a truthy value
    seconds = time.monotonic() - killed
    holder = kube.get("Lease", namespace, lease_name(namespace, pool))["spec"].get("holderIdentity", "")
    return PickerFailover(leader, after, seconds, floor, lease.get("holderIdentity", ""), holder)
