"""Several operator replicas, one acting: the operator runs only while this replica holds the Lease.

A standby only reads the Lease (and answers its liveness probe); once it acquires the Lease it starts
kopf. The holder renews every retry period; a watchdog thread, apart from the event loop and from any
hung API request, ends the process (as controller-runtime's manager does) the moment the renew deadline
passes without a renewal, which is ``lease_duration - renew_deadline`` seconds before a standby may take
the Lease. Ending the process is the fence: no reconciler pass, worker thread or queued request of the
old holder survives it. On a clean stop (SIGTERM, a rollout) the Lease is released at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from ..kube import KubeError
from ..kube.lease import LeaseApi, LeaseElector, LeaseTiming
from .operator import OperatorContext, RunOptions, _stopped, _wait_stop, run_operator

log = logging.getLogger(__name__)
LOST_EXIT_CODE = 3  # the process ends with this when it lost the Lease (its pod restarts as a standby)
WATCHDOG_PERIOD = 0.1  # how often the watchdog looks at the renew deadline
STOP_TIMEOUT = 30.0  # how long a clean stop waits for kopf before the Lease is released anyway


@dataclass(frozen=True)
class LeaderElection:
    """Where the Lease is and who this replica is."""

    namespace: str
    name: str
    identity: str
    timing: LeaseTiming = field(default_factory=LeaseTiming)


def candidate_identity(env: Mapping[str, str]) -> str:
    """The pod's name (or the host's) and a random suffix: a restarted process is a new candidate."""
    return f"{env.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def exit_process() -> None:
    """End the process at once: the fence that guarantees a replica that lost its Lease stops acting."""
    log.critical("the leader lease was not renewed within its deadline: stopping now")
    logging.shutdown()
    os._exit(LOST_EXIT_CODE)


class Watchdog:
    """A daemon thread that calls ``on_lost`` once the elector's renew deadline has passed."""

    def __init__(self, elector: LeaseElector, on_lost: Callable[[], None]) -> None:
        self.elector, self.on_lost = elector, on_lost
        self.fired = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ascend-fleet-lease-watchdog", daemon=True)

    def start(self) -> Watchdog:
        """Start watching (once the Lease is held)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (a clean stop, before the Lease is released)."""
        self._stop.set()
        self._thread.join(5)

    def _watch(self) -> None:
        while not self._stop.wait(WATCHDOG_PERIOD):
            if self.elector.deadline_passed():
                self.fired.set()
                self.on_lost()
                return


def fence(elector: LeaseElector, on_lost: Callable[[], None]) -> Callable[[], None]:
    """A check before each request of the operator's client: past the renew deadline nothing is sent.

    The watchdog alone could lose a race after the process was frozen (SIGSTOP, a stalled VM): on waking,
    a worker thread might send a write before the watchdog's next look. The fence sees the deadline first.
    """

    def check() -> None:
        if elector.deadline_passed():
            on_lost()
            raise KubeError(0, "LeaseLost", "this operator no longer holds the leader lease")

    return check


async def _serve_standby_health(port: int | None) -> web.AppRunner | None:
    """The liveness endpoint kopf serves once it runs, answered meanwhile so the standby is not restarted."""
    if not port:
        return None

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="standby")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def _acquire(elector: LeaseElector, stop_flag) -> bool:
    """Attempt every retry period until the Lease is held (True) or the stop flag is set (False)."""
    reason = ""
    while not await asyncio.to_thread(elector.attempt):
        if elector.last_reason != reason:
            reason = elector.last_reason
            log.info("standing by for the leader lease: %s", reason)
        if await _wait_stop(stop_flag, elector.timing.retry_period):
            return False
    return True


async def _hold(elector: LeaseElector, operator: asyncio.Task, give_up: Callable[[], bool]) -> None:
    """Renew the Lease every retry period until the operator ends, ``give_up`` says so, or the deadline passes."""
    while not operator.done() and not give_up() and not elector.deadline_passed():
        await asyncio.wait({operator}, timeout=elector.timing.retry_period)
        if not operator.done():
            await asyncio.to_thread(elector.attempt)


async def run_elected(
    ctx: OperatorContext,
    options: RunOptions,
    election: LeaderElection,
    stop_flag=None,
    ready_flag=None,
    on_lost: Callable[[], None] = exit_process,
    api: LeaseApi | None = None,
) -> None:
    """Stand by until this replica holds the Lease, then run the operator for as long as it keeps it."""
    elector = LeaseElector(
        api or ctx.kube, election.namespace, election.name, election.identity, election.timing
    )
    health = await _serve_standby_health(options.health_port)
    try:
        acquired = await _acquire(elector, stop_flag)
    finally:
        if health is not None:
            await health.cleanup()
    if not acquired:
        return
    log.info("holding the leader lease %s/%s as %s", election.namespace, election.name, election.identity)
    watchdog = Watchdog(elector, on_lost).start()
    ctx.kube.fence = fence(elector, on_lost)
    kopf_stop = threading.Event()
    operator = asyncio.create_task(run_operator(ctx, options, stop_flag=kopf_stop, ready_flag=ready_flag))
    try:
        await _hold(elector, operator, lambda: _stopped(stop_flag))
    finally:
        kopf_stop.set()
        # Keep renewing while kopf stops: its last passes may still write, and only a holder may.
        stopping_until = asyncio.get_running_loop().time() + STOP_TIMEOUT
        await _hold(elector, operator, lambda: asyncio.get_running_loop().time() > stopping_until)
        watchdog.stop()
    if not operator.done():
        log.warning("the operator did not stop within %.0fs: the lease is left to expire", STOP_TIMEOUT)
        return
    if not watchdog.fired.is_set() and not elector.deadline_passed():
        await asyncio.to_thread(elector.release)  # only once nothing of this operator runs any more
        log.info("released the leader lease")
    operator.result()  # an error that ended the operator ends the caller too
