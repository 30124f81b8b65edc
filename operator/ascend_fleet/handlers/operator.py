"""The kopf operator: indexes of children, one reconciler daemon per AscendInference, the control loop.

Everything here is wiring. Decisions are made by ``reconcile`` and ``control``; the daemon only
decides *when* to run a pass: on any change to the object or its children (via the wake-up flags),
when the previous pass asked to look again (drain and backoff timers), and at least every
``reconcile.resyncInterval`` -- but never while a write of an earlier pass is still missing from the
watch cache (:mod:`..reconcile.expectations`).

The kopf indexes are the operator's watch cache: engine pods (slimmed), Services, PDBs and the
AscendInferences themselves. The reconcilers and the control loop read them; nothing lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import kopf

from ..api import names
from ..api.settings import OperatorSettings
from ..kube import Kube, KubeError
from ..reconcile.apply import Outcome, observe_routing, reconcile_once
from ..reconcile.expectations import Expectations, children_by_name
from ..reconcile.observe import observed_children, owned_by, wants_routing_list
from ..reconcile.refusals import Refusal, current, refused_again
from ..render.routing import picker_name
from ..status.fleet import slim_pod
from .toggles import notify_on_change_only
from .wakeups import Wakeups

log = logging.getLogger(__name__)
ERROR_BACKOFF = (1.0, 30.0)  # first retry and cap after an API error during a pass
SETTLE_SECONDS = 0.5  # after our own writes, let the watch deliver them before the next pass
RESTART_BACKOFF = (1.0, 30.0)  # first restart of kopf after it stopped on an error, and the cap
OPERATOR_RESTARTS: list[str] = []  # why kopf had to be started again
# After creating children, a status that only says "pods still starting" waits this long (or until
# Ready): one status write for the whole start-up instead of one per pod that comes up.
STATUS_HOLD_SECONDS = 5.0


@dataclass
class OperatorContext:
    """What the handlers share: settings, the client, wake-up flags, our last status writes."""

    settings: OperatorSettings
    kube: Kube
    wakeups: Wakeups = field(default_factory=Wakeups)
    expectations: Expectations = field(default_factory=Expectations)
    gone: set[str] = field(default_factory=set)  # uids whose DELETED event arrived: their daemon ends
    extra_startup: list = field(default_factory=list)  # callables(registry-scoped) e.g. the control loop
    # False: only the watch caches (indexes) and the extra hooks, no reconcilers (the control-loop benchmark).
    reconcile: bool = True


class RetryForever:
    """Backoffs for kopf: the given delays, then the last one again and again (a fresh sequence per request).

    kopf escalates an API error once its backoff sequence ends, and an escalated error in a watch stops the
    operator; a sequence without an end keeps every request (and watch) retrying through an outage.
    """

    def __init__(self, delays: Iterable[float]) -> None:
        self.delays = tuple(delays)

    def __iter__(self) -> Iterator[float]:
        yield from self.delays
        while True:
            yield self.delays[-1]


def _values(index: kopf.Index, key: tuple[str, str]) -> Iterable[dict]:
    return list(index.get(key, []))


def build_registry(ctx: OperatorContext) -> kopf.OperatorRegistry:
    """A fresh registry with every handler, so several operators can run side by side in tests."""
    notify_on_change_only()  # kopf's start-up barrier, linear instead of quadratic in the fleet (toggles.py)
    registry = kopf.OperatorRegistry()
    child_filter = {names.LABEL_NAME: kopf.PRESENT}

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_) -> None:
        # Keep kopf's bookkeeping under the project's own API group, not kopf.zalando.org.
        settings.persistence.finalizer = f"{names.GROUP}/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=names.GROUP, key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING  # events are written by the reconciler itself
        settings.watching.server_timeout = max(
            1, round(ctx.settings.reconcile.watch_timeout)
        )  # whole seconds
        # Retry API errors and outages for as long as they last: the operator never gives up on the API.
        settings.networking.error_backoffs = RetryForever((1, 2, 5, 10))

    @kopf.on.login(registry=registry)
    def login(**_) -> kopf.ConnectionInfo:
        return connection_info(ctx.kube)

    @kopf.index("pods", labels=child_filter, registry=registry, id="engine_pods")
    async def engine_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_) -> dict:
        return {(namespace, labels[names.LABEL_NAME]): copy.deepcopy(slim_pod(dict(body)))}

    @kopf.index(names.GROUP, names.VERSION, names.PLURAL, registry=registry, id="inferences")
    async def inferences(namespace: str | None, name: str, body: kopf.Body, **_) -> dict:
        return {(namespace, name): _object_snapshot(body)}

    @kopf.index("services", labels=child_filter, registry=registry, id="engine_services")
    async def engine_services(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_) -> dict:
        return {(namespace, labels[names.LABEL_NAME]): _snapshot(body)}

    @kopf.index(
        "policy", "v1", "poddisruptionbudgets", labels=child_filter, registry=registry, id="engine_pdbs"
    )
    async def engine_pdbs(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_) -> dict:
        return {(namespace, labels[names.LABEL_NAME]): _snapshot(body)}

    for hook in ctx.extra_startup:
        hook(registry)
    if not ctx.reconcile:
        return registry

    # kopf's callback protocols type ``namespace`` as optional for every resource; these are namespaced.
    @kopf.on.event("pods", labels=child_filter, registry=registry)
    @kopf.on.event("services", labels=child_filter, registry=registry)
    @kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=child_filter, registry=registry)  # type: ignore[arg-type]
    async def child_changed(namespace: str, labels: Mapping[str, str], **_) -> None:
        ctx.wakeups.wake(namespace, labels[names.LABEL_NAME])

    @kopf.on.event(names.GROUP, names.VERSION, names.PLURAL, registry=registry)  # type: ignore[arg-type]
    async def object_changed(namespace: str, name: str, type: str, uid: str, **_) -> None:
        if type == "DELETED":  # without a finalizer kopf does not stop the daemon of a deleted object
            ctx.gone.add(uid)
        ctx.wakeups.wake(namespace, name)

    # Namespaced, as above; and kopf passes indexes as keyword arguments named by their ids, which its
    # DaemonFn cannot declare.
    @kopf.daemon(  # type: ignore[arg-type]
        names.GROUP,
        names.VERSION,
        names.PLURAL,
        registry=registry,
        cancellation_timeout=10.0,
        initial_delay=0,
    )
    async def reconciler(
        stopped: kopf.DaemonStopped,
        body: kopf.Body,
        namespace: str,
        name: str,
        engine_pods: kopf.Index,
        engine_services: kopf.Index,
        engine_pdbs: kopf.Index,
        logger: kopf.Logger,
        **_,
    ) -> None:
        await run_reconciler(
            ctx, stopped, body, namespace, name, engine_pods, engine_services, engine_pdbs, logger
        )

    _daemons_without_finalizer(registry)
    return registry


def _daemons_without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """Let AscendInferences be deleted without a finalizer.

    kopf puts a finalizer on every object that has a daemon, so that it can stop the daemon before
    the object goes: one PATCH on create and one on delete per object, and an object that cannot be
    deleted while the operator is down. Neither is needed here: the children carry ownerReferences
    (the garbage collector removes them), and the daemon ends itself on the object's DELETED event.
    kopf has no public switch for this, so the registered daemon handlers are marked; if kopf's
    registry ever changes shape, the finalizer simply stays.
    """
    handlers = getattr(getattr(registry, "_spawning", None), "_handlers", None)
    if not isinstance(handlers, list):
        return
    handlers[:] = [
        dataclasses.replace(h, requires_finalizer=False)
        if dataclasses.is_dataclass(h) and not isinstance(h, type) and getattr(h, "requires_finalizer", None)
        else h
        for h in handlers
    ]


async def run_reconciler(
    ctx: OperatorContext, stopped, body, namespace, name, pods, services, pdbs, logger
) -> None:
    """The per-object loop: pass, then wait for a wake-up, a timer or the resync interval.

    It is a coroutine on kopf's loop and runs each pass (blocking HTTP) in a worker thread only for the
    pass's duration: a sync daemon would hold one of kopf's executor threads for the object's lifetime,
    and a few dozen objects would starve every other handler.
    """
    flag = ctx.wakeups.flag(namespace, name)
    key = (namespace, name)
    resync = ctx.settings.reconcile.resync_interval
    error_delay = ERROR_BACKOFF[0]
    written: dict | None = None  # our last status write, until the watch has delivered it
    refusals: dict[tuple[str, str], Refusal] = {}  # refused creates of this object, for backoff and status
    hold_status_until: float | None = None
    uid = body.get("metadata", {}).get("uid", "")
    try:
        while not stopped and uid not in ctx.gone:
            flag.clear()
            snapshot, written = acting_view(_snapshot(body), written)
            candidates = (_values(pods, key), _values(services, key), _values(pdbs, key))
            # Writes of an earlier pass the cache does not show yet: deciding now would repeat them.
            if ctx.expectations.pending(key, children_by_name(*candidates), time.time()):
                await _wait(
                    stopped,
                    flag,
                    min(ctx.expectations.wait_hint(key, time.time()) or resync, resync),
                    settle=0.0,
                )
                continue
            observed = observed_children(uid, *candidates)
            generation = snapshot["metadata"].get("generation")
            owned = {k for k, child in children_by_name(*candidates).items() if owned_by(child, uid)}
            refusals = current(refusals, generation, owned)
            observed.refused = dict(refusals)
            outcome = Outcome()
            try:
                picker_service = observed.services.get(picker_name(name))
                mode = ((snapshot.get("spec") or {}).get("routing") or {}).get("mode", "service")
                if ctx.settings.routing.enabled and wants_routing_list(mode, picker_service, uid):
                    observed.routing, observed.routing_missing = await asyncio.to_thread(
                        observe_routing, ctx.kube, namespace, name, uid
                    )
                    refusals = current(refusals, generation, owned | set(observed.routing))
                    observed.refused = dict(refusals)
                result = await asyncio.to_thread(
                    reconcile_once,
                    ctx.kube,
                    snapshot,
                    observed,
                    ctx.settings,
                    None,
                    outcome,
                    hold_status_until,
                )
            except KubeError as error:
                if outcome.expectations:  # some writes landed: the API answers, only this request failed
                    error_delay = ERROR_BACKOFF[0]
                logger.warning(
                    "reconcile of %s/%s failed, retrying in %gs: %s", namespace, name, error_delay, error
                )
                ctx.expectations.expect(key, outcome.expectations)
                _note_refusals(refusals, outcome, generation)
                await _wait(stopped, flag, error_delay, settle=error_delay)
                error_delay = min(error_delay * 2, ERROR_BACKOFF[1])
                continue
            error_delay = ERROR_BACKOFF[0]
            ctx.expectations.expect(key, outcome.expectations)
            _note_refusals(refusals, outcome, generation)
            if outcome.created:
                hold_status_until = time.time() + STATUS_HOLD_SECONDS
            if result.written is not None:
                written = result.written
            wait = min(result.requeue_after or resync, resync)
            await _wait(stopped, flag, wait, settle=SETTLE_SECONDS if result.wrote else 0.0)
    finally:
        ctx.wakeups.forget(namespace, name)
        ctx.expectations.forget(key)
        ctx.gone.discard(uid)


def _note_refusals(
    refusals: dict[tuple[str, str], Refusal], outcome: Outcome, generation: int | None
) -> None:
    """Count this pass's refused creates (for their backoff) and forget the ones that were created."""
    now = time.time()
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


async def _wait(stopped, flag: asyncio.Event, seconds: float, settle: float) -> None:
    """Sleep up to ``seconds``; a wake-up ends it early, but never before ``settle`` has passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    if settle > 0:
        await asyncio.sleep(min(settle, seconds))
    while not stopped:
        remaining = deadline - loop.time()
        if remaining <= 0 or flag.is_set():
            return
        # Short slices, so a stop request is noticed promptly too.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(flag.wait(), min(remaining, 0.5))


def _snapshot(body) -> dict:
    """A plain, detached copy of a kopf body (kopf's views change under our feet)."""
    return copy.deepcopy(dict(body))


def _object_snapshot(body) -> dict:
    """An AscendInference as the control loop's cache keeps it: without managedFields and kopf's annotations."""
    obj = dict(body)
    meta = {
        k: v for k, v in dict(obj.get("metadata") or {}).items() if k not in ("managedFields", "annotations")
    }
    return copy.deepcopy({**obj, "metadata": meta})


def connection_info(kube: Kube) -> kopf.ConnectionInfo:
    """kopf's credentials, taken from the same configuration as our client (one source of truth)."""
    conf = kube.api.configuration
    token = (conf.api_key or {}).get("authorization") or (conf.api_key or {}).get("BearerToken")
    scheme, _, token_value = (token or "").partition(" ")
    return kopf.ConnectionInfo(
        server=conf.host,
        ca_path=conf.ssl_ca_cert,
        insecure=not conf.verify_ssl,
        scheme=scheme or None if token else None,
        token=token_value or None,
        certificate_path=conf.cert_file,
        private_key_path=conf.key_file,
        default_namespace=None,
    )


@dataclass
class RunOptions:
    namespaces: list[str] = field(default_factory=list)  # empty: cluster-wide
    peering: str | None = None
    priority: int = 0  # among peered operators the highest priority acts; equal ones pause each other
    health_port: int | None = None
    metrics_port: int | None = None


async def run_operator(ctx: OperatorContext, options: RunOptions, stop_flag=None, ready_flag=None) -> None:
    """Run kopf until stopped (the caller owns the event loop).

    Should kopf stop on an error (an API answer it does not retry), it is started again after a backoff
    instead of ending the process: the reconciler is level-based and keeps its state in the objects' status,
    so a fresh start picks up where the old one was.
    """
    liveness = f"http://0.0.0.0:{options.health_port}/healthz" if options.health_port else None
    delay = RESTART_BACKOFF[0]
    while True:
        try:
            await kopf.operator(
                registry=build_registry(ctx),
                clusterwide=not options.namespaces,
                namespaces=options.namespaces,
                standalone=options.peering is None,
                peering_name=options.peering,
                priority=options.priority,
                liveness_endpoint=liveness,
                stop_flag=stop_flag,
                ready_flag=ready_flag,
            )
            return
        except asyncio.CancelledError:
            raise
        except Exception as error:  # kopf's and aiohttp's errors: anything but a stop
            if _stopped(stop_flag):
                return
            log.error("the operator stopped on an error (%r); starting it again in %.0fs", error, delay)
            OPERATOR_RESTARTS.append(repr(error))
        if await _wait_stop(stop_flag, delay):
            return
        delay = min(delay * 2, RESTART_BACKOFF[1])


def _stopped(stop_flag) -> bool:
    return stop_flag is not None and stop_flag.is_set()


async def _wait_stop(stop_flag, seconds: float) -> bool:
    """Sleep ``seconds`` unless the stop flag (a threading.Event here) is set meanwhile; True if stopped."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if _stopped(stop_flag):
            return True
        await asyncio.sleep(0.2)
    return _stopped(stop_flag)


class OperatorThread:
    """The operator in a background thread with its own event loop (tests and ``ascend-fleet dev``)."""

    def __init__(self, ctx: OperatorContext, options: RunOptions | None = None):
        self.ctx, self.options = ctx, options or RunOptions()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="ascend-fleet-operator", daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        try:
            asyncio.run(run_operator(self.ctx, self.options, stop_flag=self._stop, ready_flag=self._ready))
        except BaseException as error:  # surfaced to the owner through .error
            self.error = error
            log.exception("operator thread stopped with an error")

    def __enter__(self) -> OperatorThread:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"operator did not become ready: {self.error!r}")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout)
