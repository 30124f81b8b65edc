"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's and controller-runtime's elector.

One candidate holds the Lease and renews it every ``retry_period``; the others read it as often and take
it over once they have seen it unchanged for ``leaseDurationSeconds`` of their own clock. Expiry is
measured from when a candidate *observed* the record change, never from the ``renewTime`` written in it,
so clock offsets between nodes do not matter (only their rates do, as in client-go).

The holder counts its ``renew_deadline`` from the moment it *sent* its last successful renewal, which is
no later than anyone can have observed it: once that deadline passes without a renewal it must stop
acting, ``lease_duration - renew_deadline`` seconds before any other candidate may take the Lease.

:func:`claim` is the decision (pure); :class:`LeaseElector` does one attempt at a time against a
:class:`LeaseApi` with injected clocks, so the election runs under test with a fake clock and a fake API.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .client import Conflict, KubeError, NotFound

LEASE_KIND = "Lease"


@dataclass(frozen=True)
class LeaseTiming:
    """The election's pace: client-go's defaults (15 s, 10 s, 2 s) take 13 to 17 s over after a kill, so
    these are shorter, for a takeover within 11 s plus kopf's start (a 3 s gap stays between the holder's
    deadline and the Lease's expiry, as client-go's 5 s does at 15 s)."""

    lease_duration: float = 10.0  # a standby takes over after seeing the Lease unrenewed this long
    renew_deadline: float = 7.0  # the holder stops acting once it has not renewed for this long
    retry_period: float = 1.0  # between two attempts to acquire or renew

    def __post_init__(self) -> None:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")


@dataclass(frozen=True)
class LeaseRecord:
    """What the election reads from a Lease's spec (and the version to write it back against)."""

    holder: str
    duration_seconds: int
    renew_time: str
    acquire_time: str
    transitions: int
    resource_version: str

    @classmethod
    def of(cls, lease: dict) -> LeaseRecord:
        """The record of a Lease object as the API answers it."""
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            renew_time=spec.get("renewTime") or "",
            acquire_time=spec.get("acquireTime") or "",
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=(lease.get("metadata") or {}).get("resourceVersion", ""),
        )

    def changed_from(self, other: LeaseRecord | None) -> bool:
        """Whether this is a new write (what restarts the observer's expiry clock)."""
        return other is None or (self.holder, self.renew_time, self.resource_version) != (
            other.holder,
            other.renew_time,
            other.resource_version,
        )


@dataclass(frozen=True)
class Claim:
    """The decision of one attempt: write a spec (``spec``) to hold the Lease, or stand by (``spec`` None)."""

    spec: dict | None
    reason: str


def claim(
    record: LeaseRecord | None,
    identity: str,
    observed_at: float | None,
    now: float,
    stamp: str,
    timing: LeaseTiming,
) -> Claim:
    """Whether ``identity`` may write the Lease now, and the spec to write.

    ``observed_at`` is when (local monotonic clock) the current record was first seen, ``now`` the same
    clock now, ``stamp`` the wall-clock MicroTime written as renewTime. An empty holder is a released Lease.
    """
    duration = max(1, round(timing.lease_duration))  # the API holds whole seconds
    if record is None:
        return Claim(_spec(identity, duration, stamp, stamp, 0), "no lease yet: created")
    if record.holder == identity:
        spec = _spec(identity, duration, record.acquire_time or stamp, stamp, record.transitions)
        return Claim(spec, "renewed")
    held_for = record.duration_seconds or timing.lease_duration
    if record.holder and observed_at is not None and now - observed_at < held_for:
        return Claim(None, f"held by {record.holder}")
    if record.holder and observed_at is None:
        return Claim(None, f"held by {record.holder} (first seen now)")
    why = "released" if not record.holder else f"{record.holder} let it expire"
    return Claim(_spec(identity, duration, stamp, stamp, record.transitions + 1), f"taken over: {why}")


def _spec(identity: str, duration: int, acquired: str, renewed: str, transitions: int) -> dict:
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration,
        "acquireTime": acquired,
        "renewTime": renewed,
        "leaseTransitions": transitions,
    }


class LeaseApi(Protocol):
    """The three calls the election makes (the RBAC it needs: get, create, update on leases)."""

    def get(self, kind: str, namespace: str | None, name: str) -> dict: ...

    def create(self, obj: dict, exist_ok: bool = True) -> dict | None: ...

    def replace(self, kind: str, namespace: str | None, name: str, body: dict) -> dict: ...


def micro_time(when: dt.datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def wall_now() -> str:
    """The wall clock as a MicroTime."""
    return micro_time(dt.datetime.now(dt.UTC))


class LeaseElector:
    """One candidate: :meth:`attempt` tries to acquire or renew once; :meth:`deadline_passed` says when to stop.

    Not thread-safe apart from :meth:`deadline_passed`, which a watchdog thread may call at any time.
    """

    def __init__(
        self,
        api: LeaseApi,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = wall_now,
    ) -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.timing = timing or LeaseTiming()
        self.clock, self.wall = clock, wall
        self.seen: LeaseRecord | None = None
        self.seen_at: float | None = None
        self.renewed_at: float | None = None  # when the last successful write was sent; None: not holding
        self.last_reason = ""

    @property
    def leading(self) -> bool:
        """Whether this candidate holds the Lease and its renew deadline has not passed."""
        return self.renewed_at is not None and not self.deadline_passed()

    def deadline_passed(self) -> bool:
        """True once a holder has gone ``renew_deadline`` without a successful renewal: it must stop acting."""
        sent = self.renewed_at
        return sent is not None and self.clock() - sent >= self.timing.renew_deadline

    def attempt(self) -> bool:
        """Read the Lease and write it if this candidate may hold it; True when it holds it afterwards.

        An API error or a conflicting write counts as a failed attempt (the holder keeps its deadline
        running); only the deadline decides that leadership is lost.
        """
        sent = self.clock()
        try:
            current = self._read()
        except KubeError as error:
            self.last_reason = f"cannot read the lease: {error}"
            return False
        now = self.clock()  # a record is seen once its answer is in: no earlier than its writer sent it
        if current is not None and current.changed_from(self.seen):
            self.seen, self.seen_at = current, now
        decision = claim(current, self.identity, self.seen_at, now, self.wall(), self.timing)
        self.last_reason = decision.reason
        if decision.spec is None:
            self.renewed_at = None
            return False
        try:
            self._write(current, decision.spec, sent)
        except KubeError as error:  # Conflict: someone else wrote first; anything else: the API is away
            self.last_reason = f"cannot write the lease: {error}"
            return False
        if self.renewed_at is None or not self.deadline_passed():
            self.renewed_at = sent
        return not self.deadline_passed()

    def release(self) -> None:
        """Give the Lease up on a clean stop, so a standby takes it at its next attempt (no expiry wait)."""
        if self.renewed_at is None or self.seen is None:
            return
        self.renewed_at = None
        spec = _spec("", 1, self.seen.acquire_time, self.wall(), self.seen.transitions)
        with contextlib.suppress(KubeError):  # gone, or taken meanwhile: nothing to give up
            self._write(self._read(), spec, self.clock())

    def _read(self) -> LeaseRecord | None:
        try:
            return LeaseRecord.of(self.api.get(LEASE_KIND, self.namespace, self.name))
        except NotFound:
            return None

    def _write(self, current: LeaseRecord | None, spec: dict, sent: float) -> None:
        meta: dict = {"name": self.name, "namespace": self.namespace}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": LEASE_KIND, "metadata": meta, "spec": spec}
        if current is None:
            answer = self.api.create(body, exist_ok=False)
            if answer is None:
                raise Conflict(409, "AlreadyExists", "the lease was created meanwhile")
        else:
            meta["resourceVersion"] = current.resource_version  # optimistic: a concurrent writer gets 409
            answer = self.api.replace(LEASE_KIND, self.namespace, self.name, body)
        self.seen, self.seen_at = LeaseRecord.of(answer), sent
