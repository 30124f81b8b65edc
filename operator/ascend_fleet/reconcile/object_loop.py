"""The per-object loop: one pass, then wait for a wake-up, a timer or the resync interval.

It decides only *when* a pass runs: on any change to the object or its children (the wake-up flag),
when the previous pass asked to look again (drain and backoff timers), and at least every
``reconcile.resyncInterval`` -- but never while a write of an earlier pass is still missing from the
watch cache (:mod:`.expectations`). The clock is injected, so the loop's timing is testable without
sleeping; the operator runs it on kopf's event loop with :class:`SystemClock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..api.settings import OperatorSettings
from ..kube import Kube, KubeError
from ..render.routing import picker_name
from .apply import PassOutcome, PassResult, observe_routing, reconcile_once
from .expectations import Expectations, children_by_name
from .observe import observed_children, owned_by, wants_routing_list
from .refusals import Refusal, current, refused_again
from .timing import ERROR_BACKOFF, STATUS_HOLD_SECONDS, WATCH_SETTLE_SECONDS

# Candidate children by the name label: pods, Services, PDBs and NetworkPolicies (ownership is checked here;
# a caller without NetworkPolicies in its cache gives the first three).
Candidates = tuple[list[dict], list[dict], list[dict]] | tuple[list[dict], list[dict], list[dict], list[dict]]


class Clock(Protocol):
    """Where the loop reads the time and waits."""

    def now(self) -> float:
        """Wall-clock seconds, the time status, refusals and expectations are stamped with."""
        ...

    async def wait(
        self, should_stop: Callable[[], bool], wake: asyncio.Event, seconds: float, settle: float
    ) -> None:
        """Sleep up to ``seconds``; ``wake`` ends it early, but never before ``settle`` has passed."""
        ...


class SystemClock:
    """The real clock: ``time.time`` and asyncio sleeps on the running loop."""

    def now(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    async def wait(
        self, should_stop: Callable[[], bool], wake: asyncio.Event, seconds: float, settle: float
    ) -> None:
        """Sleep up to ``seconds``; a wake-up ends it early, but never before ``settle`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        if settle > 0:
            await asyncio.sleep(min(settle, seconds))
        while not should_stop():
            remaining = deadline - loop.time()
            if remaining <= 0 or wake.is_set():
                return
            # Short slices, so a stop request is noticed promptly too.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), min(remaining, 0.5))


@dataclass
class ObjectLoop:
    """One AscendInference's reconciler: its passes and what it remembers between them.

    ``read_object`` and ``read_children`` return detached copies of the watch cache's current view.
    ``reconcile_pass`` and ``list_routing`` default to the real applier; they run in a worker thread
    (blocking HTTP), only for a pass's duration.
    """

    kube: Kube
    settings: OperatorSettings
    expectations: Expectations
    namespace: str
    name: str
    uid: str
    read_object: Callable[[], dict]
    read_children: Callable[[], Candidates]
    logger: logging.Logger | logging.LoggerAdapter
    clock: Clock = field(default_factory=SystemClock)
    reconcile_pass: Callable[..., PassResult] = reconcile_once
    list_routing: Callable[..., tuple[dict, frozenset[str]]] = observe_routing
    # The nodes whose Lease went stale (handlers.nodeleases), read at the start of each pass.
    read_dead_nodes: Callable[[], frozenset[str]] = frozenset
    written: dict | None = None  # our last status write, until the watch has delivered it
    refusals: dict[tuple[str, str], Refusal] = field(default_factory=dict)  # refused creates, for backoff
    hold_status_until: float | None = None
    error_delay: float = ERROR_BACKOFF[0]

    @property
    def key(self) -> tuple[str, str]:
        """The object's (namespace, name)."""
        return (self.namespace, self.name)

    async def run(self, should_stop: Callable[[], bool], wake: asyncio.Event) -> None:
        """Pass and wait until ``should_stop()``; the object's expectations are forgotten at the end."""
        try:
            while not should_stop():
                wake.clear()
                await self.step(should_stop, wake)
        finally:
            self.expectations.forget(self.key)

    async def step(self, should_stop: Callable[[], bool], wake: asyncio.Event) -> None:
        """One turn of the loop: a pass (unless earlier writes are still unseen), then its wait."""
        resync = self.settings.reconcile.resync_interval
        snapshot, self.written = acting_view(self.read_object(), self.written)
        candidates = self.read_children()
        # Writes of an earlier pass the cache does not show yet: deciding now would repeat them.
        by_name = children_by_name(*candidates)
        if self.expectations.pending(self.key, by_name, self.clock.now()):
            hint = self.expectations.wait_hint(self.key, self.clock.now())
            await self.clock.wait(should_stop, wake, min(hint or resync, resync), settle=0.0)
            return
        generation = snapshot["metadata"].get("generation")
        owned = {k for k, child in by_name.items() if owned_by(child, self.uid)}
        outcome = PassOutcome()
        try:
            result = await self._pass(snapshot, candidates, generation, owned, outcome)
        except KubeError as error:
            await self._after_error(should_stop, wake, error, outcome, generation)
            return
        self.error_delay = ERROR_BACKOFF[0]
        self._after_writes(outcome, generation)
        if outcome.created:
            self.hold_status_until = self.clock.now() + STATUS_HOLD_SECONDS
        if result.written is not None:
            self.written = result.written
        wait = min(result.requeue_after or resync, resync)
        settle = WATCH_SETTLE_SECONDS if result.wrote else 0.0
        await self.clock.wait(should_stop, wake, wait, settle=settle)

    async def _pass(
        self,
        snapshot: dict,
        candidates: Candidates,
        generation: int | None,
        owned: set[tuple[str, str]],
        outcome: PassOutcome,
    ) -> PassResult:
        observed = observed_children(self.uid, *candidates)
        observed.dead_nodes = self.read_dead_nodes()
        self.refusals = current(self.refusals, generation, owned)
        observed.refused = dict(self.refusals)
        picker_service = observed.services.get(picker_name(self.name))
        mode = ((snapshot.get("spec") or {}).get("routing") or {}).get("mode", "service")
        if self.settings.routing.enabled and wants_routing_list(mode, picker_service, self.uid):
            observed.routing, observed.routing_missing = await asyncio.to_thread(
                self.list_routing, self.kube, self.namespace, self.name, self.uid
            )
            self.refusals = current(self.refusals, generation, owned | set(observed.routing))
            observed.refused = dict(self.refusals)
        hold_until = self.hold_status_until

        def reconcile() -> PassResult:  # the clock is read in the worker, when the pass starts
            now = self.clock.now()
            return self.reconcile_pass(self.kube, snapshot, observed, self.settings, now, outcome, hold_until)

        return await asyncio.to_thread(reconcile)

    async def _after_error(
        self,
        should_stop: Callable[[], bool],
        wake: asyncio.Event,
        error: KubeError,
        outcome: PassOutcome,
        generation: int | None,
    ) -> None:
        if outcome.expectations:  # some writes landed: the API answers, only this request failed
            self.error_delay = ERROR_BACKOFF[0]
        self.logger.warning(
            "reconcile of %s/%s failed, retrying in %gs: %s",
            self.namespace,
            self.name,
            self.error_delay,
            error,
        )
        self._after_writes(outcome, generation)
        await self.clock.wait(should_stop, wake, self.error_delay, settle=self.error_delay)
        self.error_delay = min(self.error_delay * 2, ERROR_BACKOFF[1])

    def _after_writes(self, outcome: PassOutcome, generation: int | None) -> None:
        self.expectations.expect(self.key, outcome.expectations)
        note_refusals(self.refusals, outcome, generation, self.clock.now())


def note_refusals(
    refusals: dict[tuple[str, str], Refusal], outcome: PassOutcome, generation: int | None, now: float
) -> None:
    """Count this pass's refused creates (for their backoff) and forget the ones that were created."""
    for refused in outcome.refused:
        key = (refused.kind, refused.name)
        refusals[key] = refused_again(
            refusals.get(key), refused.kind, refused.name, refused.reason, refused.message, now, generation
        )
    for obj in outcome.created:
        refusals.pop((obj["kind"], obj["metadata"]["name"]), None)


def acting_view(snapshot: dict, written: dict | None) -> tuple[dict, dict | None]:
    """The object a pass acts on, and our last status write if the watch has still not delivered it (pure).

    Until the watch shows our own status write, the pass acts on the object that write returned: newer
    than the watch's in every field, its resourceVersion included. The status write that follows is
    guarded by that version; guarded by the watch's older one it was refused with a conflict (then a GET
    and a retry: 0.5 to 1.6 % of objects at 4,000 in ``bench/reconcile``, whenever a pod turned Ready before
    the watch caught up).
    """
    if written is None or _caught_up(snapshot, written):
        return snapshot, None
    return copy.deepcopy(written), written


def _caught_up(current: dict, written: dict) -> bool:
    """Whether ``current`` is at least as new as ``written``.

    resourceVersions are opaque by contract, but etcd (and the local API) issue increasing integers;
    where they are not integers, only an exact match counts.
    """
    have, want = current["metadata"].get("resourceVersion"), written["metadata"].get("resourceVersion")
    try:
        return int(have) >= int(want)
    except (TypeError, ValueError):
        return have == want
