"""kopf wiring of the node Leases: listed every second for as long as the operator runs.

One asyncio task on kopf's event loop (the list runs in a worker thread), started with the operator and
cancelled with it, as the control loop is. Each list updates :class:`NodeLeases`; when a node turns dead
every reconciler is woken, since a dead node sends no watch event of its own. The reconcilers read
:attr:`NodeLeases.dead` on each pass (see ``reconcile.plan``: the dead node's leaders leave the Service and
their replicas are made again on other nodes).

The Leases are listed rather than watched: one request a second served from the API server's watch cache
(``resourceVersion=0``), a few hundred bytes per node, and nothing to resume after an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import kopf

from ..api import names
from ..kube import Kube
from ..reconcile.nodeleases import Renewal, dead_nodes, observe_leases, watched_through
from ..reconcile.timing import NODE_LEASE_GAP_SECONDS, NODE_LEASE_POLL_SECONDS, NODE_LEASE_STALE_SECONDS
from .wakeups import Wakeups

_log = logging.getLogger(__name__)


class NodeLeases:
    """The node Leases as last listed, and the nodes they call dead (on ``clock``, seconds)."""

    def __init__(
        self,
        kube: Kube,
        clock: Callable[[], float] = time.monotonic,
        stale: float = NODE_LEASE_STALE_SECONDS,
    ) -> None:
        self.kube, self.clock, self.stale = kube, clock, stale
        self.renewals: dict[str, Renewal] = {}
        self.dead: frozenset[str] = frozenset()
        self.failing = False  # the last list failed (logged once per outage)
        self.listed: float | None = None  # when the last list succeeded (on ``clock``)

    def refresh(self) -> frozenset[str]:
        """List the node Leases once; the nodes that turned dead since the last list."""
        leases = self.kube.list("Lease", names.NODE_LEASE_NAMESPACE, cached=True)
        now = self.clock()
        if not watched_through(self.listed, now, NODE_LEASE_GAP_SECONDS):
            self.renewals = {}  # renewals may have gone unseen: every node is watched afresh
        self.listed = now
        self.renewals = observe_leases(self.renewals, leases, now)
        before, self.dead = self.dead, dead_nodes(self.renewals, now, self.stale)
        return self.dead - before

    async def run(self, wakeups: Wakeups, interval: float = NODE_LEASE_POLL_SECONDS) -> None:
        """List every ``interval`` seconds until cancelled; wake every reconciler when a node dies."""
        while True:
            try:
                died = await asyncio.to_thread(self.refresh)
            except Exception as error:  # an outage, a fence, a missing permission: keep the last view
                if not self.failing:
                    _log.warning("cannot list the node Leases in %s (%s)", names.NODE_LEASE_NAMESPACE, error)
                self.failing = True
            else:
                self.failing = False
                if died:
                    _log.warning("node Lease not renewed for %.0fs: %s", self.stale, ", ".join(sorted(died)))
                    wakeups.wake_all()
            await asyncio.sleep(interval)


def node_leases_hook(leases: NodeLeases, wakeups: Wakeups) -> Callable[[kopf.OperatorRegistry], None]:
    """Run ``leases`` for the operator's lifetime (registered with the reconcilers)."""

    def install(registry: kopf.OperatorRegistry) -> None:
        tasks: list[asyncio.Task] = []

        @kopf.on.startup(registry=registry)
        async def start_node_leases(**_) -> None:
            tasks.append(asyncio.create_task(leases.run(wakeups), name="ascend-fleet-node-leases"))

        @kopf.on.cleanup(registry=registry)
        async def stop_node_leases(**_) -> None:
            while tasks:
                task = tasks.pop()
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    return install
