"""A serving endpoint picker's death, timed as the pool's gateway in front of two pickers lives through it.

Two picker pods of one pool either all serve (the default) or elect a leader through a Lease, and then only
the leader serves. :func:`kill_serving_picker` sends SIGKILL to a serving picker's process (which leaves an
elected leader's Lease unreleased) and times, through
:meth:`~ascend_fleet_dev.real.localpods.LocalPods.route`, until another picker serves. The floor: for
serving pickers none (the other one already serves); for elected ones the Lease's duration less the age of its
last renewal at the kill, since no standby may take a Lease before it expires.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ascend_fleet.api.times import parse_rfc3339
from ascend_fleet.kube import Kube, wait_for
from ascend_fleet_dev.real.localpods import LocalPods, Route

_POLL_SECONDS = 0.2


def lease_name(namespace: str, pool: str) -> str:
    """The picker's leader Lease, named by the picker after its pool."""
    return f"epp-{namespace}-{pool}.gateway-api-inference-extension.sigs.k8s.io"


@dataclass(frozen=True)
class PickerFailover:
    killed: Route  # the serving picker whose process was killed
    serving: Route  # a picker serving afterwards
    seconds: float  # from the kill until ``serving`` serves
    floor: float  # elected: the Lease's duration less its renewal's age at the kill; otherwise 0
    holder_before: str = ""  # the Lease's holder (elected pickers only)
    holder_after: str = ""
    at: float = 0.0  # time.monotonic() of the SIGKILL
    dead_at: float = 0.0  # time.monotonic() once the process was reaped, its sockets closed


def _holder(kube: Kube, namespace: str, pool: str) -> dict:
    return kube.get("Lease", namespace, lease_name(namespace, pool))["spec"]


def kill_serving_picker(
    pickers: LocalPods, kube: Kube, namespace: str, pool: str, timeout: float = 60.0
) -> PickerFailover:
    """SIGKILL a serving picker of ``pool`` (its leader, where they elect one) and wait until another serves."""
    victim = pickers.route(namespace, pool)
    if victim is None or len(pickers.pool_routes(namespace, pool)) < 2:
        raise RuntimeError(f"{namespace}/{pool} has no serving picker with another beside it")
    floor, lease = 0.0, {}
    if victim.elects:
        lease = _holder(kube, namespace, pool)
        renewed = parse_rfc3339(lease.get("renewTime")) or time.time()
        floor = max(float(lease["leaseDurationSeconds"]) - (time.time() - renewed), 0.0)
    killed = dead = time.monotonic()
    for process in pickers.programs(namespace, victim.picker):
        if process.name == "epp":
            killed = time.monotonic()
            process.kill()
            dead = time.monotonic()

    def another_serves() -> Route | None:
        return next(
            (r for r in pickers.pool_routes(namespace, pool) if r.picker != victim.picker and r.serves()),
            None,
        )

    after = wait_for(another_serves, timeout, "another picker serving", interval=_POLL_SECONDS)
    assert after is not None  # wait_for returns only a truthy value
    seconds = time.monotonic() - killed
    if not victim.elects:
        return PickerFailover(victim, after, seconds, floor, at=killed, dead_at=dead)
    holder = _holder(kube, namespace, pool).get("holderIdentity", "")
    return PickerFailover(
        victim, after, seconds, floor, lease.get("holderIdentity", ""), holder, at=killed, dead_at=dead
    )
