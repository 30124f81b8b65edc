"""The control loop: one per operator process, one cycle every ``control.interval``.

A cycle reads every AscendInference and its engine pods from a :class:`Source`: in the operator, the
watch cache kopf already keeps (no API call at all); :class:`ListSource`, two list calls per
namespace, stays as the baseline the benchmark compares with. It then asks Prometheus the distinct window queries of all rules (bounded by distinct windows, not objects),
lets :mod:`.evaluate` decide, and sends the writes each decision's action (:mod:`.actions`) returns, through
the same paths as everything else:

- scale: a merge patch of ``spec.parallelism.data``, as HPA does through the scale subresource (of
  ``spec.disaggregation.<role>.parallelism.data`` for a rule with a role); the reconciler then creates or drains
  replicas;
- restart and replace: :func:`~ascend_fleet.render.drain_patch` on the replica's leader; the reconciler
  deletes the replica after ``drainSeconds`` and recreates it;
- shift: the traffic annotation, from which the reconciler renders the picker's rewrite;
- every decision is recorded first, in ``status.actions`` (with the object's resourceVersion as a
  precondition, so a concurrent writer makes us re-read instead of overwriting), then carried out,
  then announced as an Event. Recording first means a crash between the two errs on the side of
  the cooldown: the action may be missing, but it is never repeated early.

``MetricsAvailable`` is written only when it changes, with a Warning Event when it turns False.
A fleet with ``spec.disaggregation`` gets its ``KVTransfer`` condition from :mod:`.kvtransfer` (two queries a
cycle for all of them), likewise written only when its status or reason changes.
Nothing the next cycle needs is kept in memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..api import names
from ..api.actions import ACTIONS
from ..api.catalog import operator_signal
from ..api.settings import OperatorSettings
from ..kube import Conflict, Kube, KubeError, NotFound
from ..observed import get_condition, slim_pod
from ..promql.guarded import parse_guarded
from ..render import InvalidSpec, validate
from ..status import set_condition
from ..telemetry import DECISIONS, RULE_EVALUATION, UNHEALTHY_NPUS
from . import npu_health
from .actions import Write, action_for
from .evaluate import (
    REASON_QUERY_FAILED,
    Evaluation,
    EvaluationSettings,
    MetricsStatus,
    evaluate,
    queries_for,
)
from .kvtransfer import update_kv_transfer
from .model import ControlDecision, FleetState
from .prometheus import Prometheus
from .queries import Observations, Query
from .state import action_record, object_state, updated_actions, with_pods

_log = logging.getLogger(__name__)

CONDITION = "MetricsAvailable"
ENGINE_PODS = {
    names.LABEL_APP_MANAGED_BY: names.MANAGED_BY,
    names.LABEL_APP_COMPONENT: names.COMPONENT_ENGINE,
}
WRITE_ATTEMPTS = 3
PARALLEL_WRITES = 4
EVENT_REASONS: dict[str, str] = {kind.name: kind.event_reason for kind in ACTIONS}


@dataclass
class CycleReport:
    """What one cycle did, for logs and the benchmark."""

    objects: int = 0
    queries: int = 0
    failed_queries: int = 0
    decisions: list[ControlDecision] = field(default_factory=list)
    writes: int = 0
    seconds: float = 0.0
    read_seconds: float = 0.0  # reading objects and pods (from the cache, or by listing)
    list_calls: int = 0  # API list requests made to read them
    query_seconds: float = 0.0  # Prometheus
    error: str | None = None


Pods = dict[tuple[str, str], list[dict]]  # engine pods (slimmed) by (namespace, AscendInference name)


class Source(Protocol):
    """Where a cycle reads the fleet from: every AscendInference, and the engine pods of each."""

    list_calls: int  # API list requests made so far

    async def read(self) -> tuple[list[dict], Pods]: ...


class ListSource:
    """Two list calls per namespace each cycle (the baseline: what the loop did before it read the cache)."""

    def __init__(self, kube: Kube, namespaces: Sequence[str] = ()):
        self.kube, self.namespaces = kube, list(namespaces)
        self.list_calls = 0

    async def read(self) -> tuple[list[dict], Pods]:
        return await asyncio.to_thread(self._read)

    def _read(self) -> tuple[list[dict], Pods]:
        bodies, pods = [], []
        every: list[str | None] = [None]  # no namespaces given: list them all
        for namespace in self.namespaces or every:
            bodies += self.kube.list(names.KIND, namespace)
            pods += self.kube.list("Pod", namespace, ENGINE_PODS)
            self.list_calls += 2
        grouped: Pods = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            name = (meta.get("labels") or {}).get(names.LABEL_NAME)
            if name:
                grouped.setdefault((meta.get("namespace", "default"), name), []).append(slim_pod(pod))
        return bodies, grouped


class ControlLoop:
    """Evaluates every object's rules each interval and acts on what held."""

    def __init__(
        self,
        settings: OperatorSettings,
        kube: Kube,
        prometheus: Prometheus | None = None,
        namespaces: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
        source: Source | None = None,
        on_cycle: Callable[[CycleReport], None] | None = None,
    ):
        """``source`` None: :class:`ListSource`, which the operator's wiring (handlers.control) swaps for its watch cache."""
        if prometheus is None:
            if not settings.prometheus.url:
                raise ValueError("the control loop needs prometheus.url in the operator configuration")
            prometheus = Prometheus.from_settings(settings.prometheus)
        self.settings, self.kube, self.prometheus = settings, kube, prometheus
        self.namespaces = list(namespaces)
        self.clock = clock
        self.policy = EvaluationSettings.from_settings(settings.control)
        self.source: Source = source if source is not None else ListSource(kube, namespaces)
        self.source_is_default = source is None  # the operator's wiring then swaps in its watch cache
        self.on_cycle = on_cycle
        self._fault_clock = npu_health.FaultClock()  # when faults without a time were first seen
        # Each object's parsed state by uid, with the resourceVersion it was parsed from (see _fleet).
        self._parsed: dict[str, tuple[str, tuple[FleetState, int] | None]] = {}

    async def run(self) -> None:
        """Cycle every interval until cancelled; a failing cycle is logged and the next one tries afresh."""
        interval = float(self.settings.control.interval)
        _log.info("control loop started: every %gs against %s", interval, self.prometheus.url)
        next_at = time.monotonic()
        while True:
            try:
                report = await self.cycle()
            except Exception:  # the loop must outlive any single cycle's surprise
                _log.exception("control-loop cycle failed")
            else:
                if self.on_cycle is not None:
                    self.on_cycle(report)
                if report.decisions or report.error:
                    _log.info(
                        "control cycle: %d objects, %d queries (%d failed), %d decisions in %.2fs%s",
                        report.objects,
                        report.queries,
                        report.failed_queries,
                        len(report.decisions),
                        report.seconds,
                        f": {report.error}" if report.error else "",
                    )
            # Keep a steady cadence; a cycle that overran starts the next one at once, never two at a time.
            next_at = max(next_at + interval, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())

    async def cycle(self, source: Source | None = None) -> CycleReport:
        """One full cycle: read (from ``source``, by default the loop's own), query, decide, act."""
        source = self.source if source is None else source
        started, now = time.perf_counter(), self.clock()
        report = CycleReport()
        calls = source.list_calls
        try:
            bodies, pods = await source.read()
        except KubeError as error:
            report.error = f"cannot list objects: {error}"
            return report
        report.read_seconds = time.perf_counter() - started
        report.list_calls = source.list_calls - calls
        # Parsing a thousand objects takes a while: keep it (and the evaluation) off kopf's event loop.
        fleets = await asyncio.to_thread(self.states, bodies, pods)
        report.objects = len(fleets)
        queries = queries_for([state for _, state in fleets], self.policy)
        read_here = [q for q in queries if operator_signal(q.window.expression) is not None]
        promql = [q for q in queries if q not in read_here]
        asked = time.perf_counter()
        observations = (
            (await self.prometheus.observe(promql, self.policy.step, now)) if promql else Observations()
        )
        report.query_seconds = time.perf_counter() - asked
        if read_here:
            await asyncio.to_thread(
                self._npu_health, read_here, [state for _, state in fleets], observations, now
            )
        report.queries, report.failed_queries = len(queries), len(observations.failures)
        evaluations = await asyncio.to_thread(
            lambda: [(body, evaluate(state, observations, now, self.policy)) for body, state in fleets]
        )
        changed = [
            (body, ev) for body, ev in evaluations if ev.decisions or _condition_changes(body, ev.metrics)
        ]
        slots = asyncio.Semaphore(PARALLEL_WRITES)

        async def write(body: dict, ev: Evaluation) -> list[ControlDecision]:
            async with slots:
                return await asyncio.to_thread(self.record, body, ev, now)

        for done in await asyncio.gather(*(write(body, ev) for body, ev in changed)):
            report.decisions += done
        report.writes = len(changed)
        # Two-role fleets: whether KV really moves (a hook of its own, apart from the rules).
        report.writes += await update_kv_transfer(self.prometheus, self.kube, bodies, now)
        report.seconds = time.perf_counter() - started
        RULE_EVALUATION.observe(report.seconds)
        return report

    # ----- reading -----

    def states(
        self, bodies: list[dict], pods: dict[tuple[str, str], list[dict]]
    ) -> list[tuple[dict, FleetState]]:
        """Each listed object that is not being deleted and parses, with its state for this cycle (see
        :meth:`_fleet`: an object unchanged since the last call is not parsed again); objects gone since then
        are forgotten."""
        fleets: list[tuple[dict, FleetState]] = []
        parsed: dict[str, tuple[str, tuple[FleetState, int] | None]] = {}
        for body in bodies:
            state = self._fleet(body, pods, parsed)
            if state is not None:
                fleets.append((body, state))
        self._parsed = parsed  # objects gone since the last cycle are forgotten
        return fleets

    def _fleet(
        self, body: dict, pods: dict[tuple[str, str], list[dict]], parsed: dict | None = None
    ) -> FleetState | None:
        """One object's state for this cycle.

        Parsing and validating the object is most of a cycle's own work (10,000 objects: about 2 s of
        CPU), and an object whose resourceVersion has not moved since the last cycle is the same object:
        its parsed state is reused and only its pods are read afresh.
        """
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        cached = self._parsed.get(uid) if uid and version else None
        known = cached[1] if cached is not None and cached[0] == version else self._parse(body)
        if parsed is not None and uid and version:
            parsed[uid] = (version, known)
        if known is None:
            return None
        state, pods_per_replica = known
        mine = [p for p in pods.get((state.namespace, state.name), []) if _owned_by(p, uid)]
        return with_pods(state, pods_per_replica, mine)

    def _parse(self, body: dict) -> tuple[FleetState, int] | None:
        body = {"apiVersion": names.API_VERSION, "kind": names.KIND, **body}  # list items lack them
        try:
            valid = validate(body, max_window=self.settings.control.max_window, parse_query=parse_guarded)
        except InvalidSpec:
            return None  # the reconciler reports it (Ready=False, InvalidSpec) and leaves it alone
        return object_state(valid), valid.layout.pods_per_replica

    def _npu_health(
        self, queries: list[Query], fleets: list[FleetState], observations: Observations, now: float
    ) -> None:
        """Answer the ``npu_unhealthy`` queries from the device plugin's ConfigMaps (one list call a cycle)."""
        configmaps: list[dict] = []
        try:
            if self.settings.control.npu_health:
                configmaps = self.kube.list("ConfigMap", names.DEVICE_INFO_NAMESPACE)
        except KubeError as error:
            message = (
                f"npu_unhealthy: cannot read the Ascend device plugin's ConfigMaps in {names.DEVICE_INFO_NAMESPACE}"
                f" ({error}); the chart grants it with rbac.npuHealth, control.npuHealth: false turns the signal off"
            )
            for query in queries:
                observations.fail(query, REASON_QUERY_FAILED, message)
            return
        faults = self._fault_clock.stamp(npu_health.faults_by_node(configmaps), now)
        found = npu_health.answer_health(queries, fleets, faults, now, self.policy.step, observations)
        UNHEALTHY_NPUS.clear()
        for (namespace, inference, role, replica), npus in found.items():
            for fault in npus:
                UNHEALTHY_NPUS.labels(
                    namespace, inference, role or "", str(replica), fault.node, fault.npu, fault.level
                ).set(1)

    # ----- writing -----

    def record(self, listed: dict, ev: Evaluation, now: float) -> list[ControlDecision]:
        """Record one object's evaluation (its decisions in ``status.actions``, its MetricsAvailable condition)
        in a status write, then act; returns the decisions carried out."""
        fleet = ev.fleet
        for _ in range(WRITE_ATTEMPTS):
            try:
                fresh = self.kube.get(names.KIND, fleet.namespace, fleet.name)
            except NotFound:
                return []
            fresh = {"apiVersion": names.API_VERSION, "kind": names.KIND, **fresh}
            # Decisions stand only on the state they were made from; if it moved, the next cycle re-decides.
            decisions = ev.decisions if _same_basis(listed, fresh) else []
            status = fresh.get("status") or {}
            patch = self._status_patch(fresh, ev, decisions, now)
            if not patch:
                return []
            try:
                written = self.kube.patch(
                    names.KIND,
                    fleet.namespace,
                    fleet.name,
                    {"metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"]}, "status": patch},
                    "status",
                )
            except Conflict:
                continue
            except KubeError as error:
                _log.warning(
                    "cannot record control-loop status of %s/%s: %s", fleet.namespace, fleet.name, error
                )
                return []
            self._announce_condition(
                fresh, get_condition(status.get("conditions") or [], CONDITION), ev.metrics
            )
            return [d for d in decisions if self._act(fresh, written, d, now)]
        _log.info("status of %s/%s kept changing; trying again next cycle", fleet.namespace, fleet.name)
        return []

    def _status_patch(
        self, fresh: dict, ev: Evaluation, decisions: list[ControlDecision], now: float
    ) -> dict:
        """The status fields the control loop owns, when they differ from what is stored."""
        status = fresh.get("status") or {}
        patch: dict = {}
        before = status.get("conditions") or []
        metrics = ev.metrics
        conditions = set_condition(
            before,
            CONDITION,
            metrics.available,
            metrics.reason,
            metrics.message,
            now,
            (fresh.get("metadata") or {}).get("generation"),
        )
        if conditions != before:
            patch["conditions"] = conditions
        if decisions:
            records = [action_record(d, now) for d in decisions]
            patch["actions"] = updated_actions(
                list(status.get("actions") or []),
                records,
                self.settings.control.actions_history,
                ev.fleet.autoscaling,
                now,
            )
        return patch

    def _announce_condition(self, body: dict, before: dict | None, metrics: MetricsStatus) -> None:
        was_false = before is not None and before.get("status") == "False"
        if not metrics.available and (
            not was_false
            or (before or {}).get("reason") != metrics.reason  # ``was_false`` means ``before`` is there
            or (before or {}).get("message") != metrics.message
        ):
            self.kube.event(body, "Warning", metrics.reason, metrics.message)
        elif metrics.available and was_false:
            self.kube.event(body, "Normal", CONDITION, f"metrics are available again: {metrics.message}")

    def _act(self, fresh: dict, written: dict, decision: ControlDecision, now: float) -> bool:
        """Carry out one recorded decision; False (with a Warning Event) when it could not be done."""
        DECISIONS.labels(decision.action, str(decision.dry_run).lower()).inc()
        action = action_for(decision.action)
        reason = EVENT_REASONS[decision.action]
        message = action.message(decision)
        try:
            for write in () if decision.dry_run else action.writes(decision, now):
                self._write(decision.namespace, write, written)
        except KubeError as error:
            self.kube.event(fresh, "Warning", "ControlActionFailed", f"{message}: failed: {error}")
            _log.warning("%s/%s: %s failed: %s", decision.namespace, decision.name, decision.action, error)
            return False
        event_type = "Warning" if action.kind.warning else "Normal"
        self.kube.event(fresh, event_type, ("DryRun" if decision.dry_run else "") + reason, message)
        _log.info("%s/%s: %s", decision.namespace, decision.name, message)
        return True

    def _write(self, namespace: str, write: Write, written: dict) -> None:
        """Send one of an action's writes."""
        patch = write.patch
        if write.guarded:
            # The precondition is our own status write: nobody changed the object since we recorded this.
            version = written["metadata"]["resourceVersion"]
            patch = {**patch, "metadata": {"resourceVersion": version, **(patch.get("metadata") or {})}}
        self.kube.patch(write.kind, namespace, write.name, patch)


def _owned_by(pod: dict, uid: str | None) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return uid is None or any(ref.get("uid") == uid and ref.get("controller") for ref in refs)


def _same_basis(listed: dict, fresh: dict) -> bool:
    """Same spec generation, traffic split and recorded actions as the cycle decided from."""
    before, now = listed.get("metadata") or {}, fresh.get("metadata") or {}
    return (
        before.get("generation") == now.get("generation")
        and _traffic(before) == _traffic(now)
        and (listed.get("status") or {}).get("actions") == (fresh.get("status") or {}).get("actions")
    )


def _traffic(meta: dict) -> str | None:
    return (meta.get("annotations") or {}).get(names.ANNOTATION_TRAFFIC)


def _condition_changes(body: dict, metrics: MetricsStatus) -> bool:
    current = get_condition((body.get("status") or {}).get("conditions") or [], CONDITION)
    wanted = "True" if metrics.available else "False"
    return current is None or (current.get("status"), current.get("reason"), current.get("message")) != (
        wanted,
        metrics.reason,
        metrics.message,
    )
