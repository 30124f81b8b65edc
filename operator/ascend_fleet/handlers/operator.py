"""The kopf operator: indexes of children, one reconciler daemon per AscendInference, the control loop.

Everything here is wiring. Decisions are made by ``reconcile`` and ``control``; when a pass runs is
the per-object loop's decision (:mod:`..reconcile.object_loop`), which each daemon runs with the
object's wake-up flag. kopf's own behaviour is changed in one place only (:mod:`.kopf_compat`).

The kopf indexes are the operator's watch cache: engine pods (slimmed), Services, PDBs, NetworkPolicies and the
AscendInferences themselves. The reconcilers and the control loop read them; nothing lists.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import kopf

from ..api import names
from ..api.settings import OperatorSettings
from ..kube import Kube
from ..observed import slim_pod
from ..reconcile.expectations import Expectations
from ..reconcile.object_loop import ObjectLoop
from ..reconcile.timing import API_RETRY_DELAYS, RESTART_BACKOFF
from . import kopf_compat
from .nodeleases import NodeLeases, node_leases_hook
from .wakeups import Wakeups

_log = logging.getLogger(__name__)
OPERATOR_RESTARTS: list[str] = []  # why kopf had to be started again


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
    # The node Leases the reconcilers read dead nodes from (made from ``kube`` when not given).
    node_leases: NodeLeases | None = None

    def __post_init__(self) -> None:
        if self.node_leases is None:
            self.node_leases = NodeLeases(self.kube)


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


def _values(index: kopf.Index, key: tuple[str, str]) -> list[dict]:
    return list(index.get(key, []))


CHILD_FILTER = {names.LABEL_NAME: kopf.PRESENT}  # the children kopf watches: those with the name label


def build_registry(ctx: OperatorContext) -> kopf.OperatorRegistry:
    """A fresh registry with every handler, so several operators can run side by side in tests."""
    registry = kopf.OperatorRegistry()
    _register_settings(registry, ctx)
    _register_indexes(registry)
    for hook in ctx.extra_startup:
        hook(registry)
    if ctx.reconcile:
        assert ctx.node_leases is not None  # made in __post_init__
        node_leases_hook(ctx.node_leases, ctx.wakeups)(registry)
        _register_reconcilers(registry, ctx)
    kopf_compat.install(registry)
    return registry


def _register_settings(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
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
        settings.networking.error_backoffs = RetryForever(API_RETRY_DELAYS)

    @kopf.on.login(registry=registry)
    def login(**_) -> kopf.ConnectionInfo:
        return connection_info(ctx.kube)


def _register_indexes(registry: kopf.OperatorRegistry) -> None:
    """The watch cache: engine pods (slimmed), Services, PDBs, NetworkPolicies and the AscendInferences."""
    child_filter = CHILD_FILTER

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

    @kopf.index(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        labels=child_filter,
        registry=registry,
        id="engine_policies",
    )
    async def engine_policies(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_) -> dict:
        return {(namespace, labels[names.LABEL_NAME]): _snapshot(body)}


def _register_reconcilers(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
    """Wake-ups on every change, and one reconciler daemon per AscendInference."""
    child_filter = CHILD_FILTER

    # kopf's callback protocols type ``namespace`` as optional for every resource; these are namespaced.
    @kopf.on.event("pods", labels=child_filter, registry=registry)
    @kopf.on.event("services", labels=child_filter, registry=registry)
    @kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=child_filter, registry=registry)
    @kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=child_filter, registry=registry)  # type: ignore[arg-type]
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
        engine_policies: kopf.Index,
        logger: kopf.Logger,
        **_,
    ) -> None:
        indexes = (engine_pods, engine_services, engine_pdbs, engine_policies)
        await run_reconciler(ctx, stopped, body, namespace, name, indexes, logger)


async def run_reconciler(
    ctx: OperatorContext,
    stopped: kopf.DaemonStopped,
    body: kopf.Body,
    namespace: str,
    name: str,
    indexes: tuple[kopf.Index, kopf.Index, kopf.Index, kopf.Index],
    logger: kopf.Logger,
) -> None:
    """Run the object's :class:`ObjectLoop` until kopf stops its daemon or the object's DELETED arrives.

    A coroutine on kopf's loop that runs each pass (blocking HTTP) in a worker thread only for the
    pass's duration: a sync daemon would hold one of kopf's executor threads for the object's lifetime,
    and a few dozen objects would starve every other handler.
    """
    key = (namespace, name)
    uid = body.get("metadata", {}).get("uid", "")
    pods, services, pdbs, policies = indexes
    loop = ObjectLoop(
        kube=ctx.kube,
        settings=ctx.settings,
        expectations=ctx.expectations,
        namespace=namespace,
        name=name,
        uid=uid,
        read_object=lambda: _snapshot(body),
        read_children=lambda: (
            _values(pods, key),
            _values(services, key),
            _values(pdbs, key),
            _values(policies, key),
        ),
        logger=logger,
        read_dead_nodes=lambda: ctx.node_leases.dead if ctx.node_leases else frozenset(),
    )
    try:
        await loop.run(lambda: bool(stopped) or uid in ctx.gone, ctx.wakeups.flag(namespace, name))
    finally:
        ctx.wakeups.forget(namespace, name)
        ctx.gone.discard(uid)


def _snapshot(body) -> dict:
    """A plain, detached copy of a kopf body (kopf's views change under our feet)."""
    return copy.deepcopy(dict(body))


def _object_snapshot(body) -> dict:
    """An AscendInference as the control loop's cache keeps it: without managedFields and kopf's annotations.

    Of the annotations only the traffic split stays: shift_traffic decides from it, and the loop checks that
    the object it writes to still has the split it decided from.
    """
    obj = dict(body)
    source = dict(obj.get("metadata") or {})
    meta = {k: v for k, v in source.items() if k not in ("managedFields", "annotations")}
    traffic = (source.get("annotations") or {}).get(names.ANNOTATION_TRAFFIC)
    if traffic is not None:
        meta["annotations"] = {names.ANNOTATION_TRAFFIC: traffic}
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
        except (asyncio.CancelledError, kopf_compat.UnsupportedKopf):
            raise  # a kopf the operator does not know stays unknown: starting again would not help
        except Exception as error:  # kopf's and aiohttp's errors: anything but a stop
            if _stopped(stop_flag):
                return
            _log.error("the operator stopped on an error (%r); starting it again in %.0fs", error, delay)
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
            _log.exception("operator thread stopped with an error")

    def __enter__(self) -> OperatorThread:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"operator did not become ready: {self.error!r}")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def is_alive(self) -> bool:
        """Whether the operator's thread still runs (it ends only when stopped or on an error)."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout)
