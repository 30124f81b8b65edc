"""A deterministic discrete-event model of one AscendInference fleet.

Each replica is a continuously batching engine modelled as processor sharing: all sequences in its
batch decode at the same per-sequence rate ``throughput(b) / b`` of the batch-size curve, which
changes only when a sequence joins or leaves. A per-replica *virtual clock* counts the decode tokens
each running sequence has received; a sequence admitted at virtual time ``V`` finishes when the clock
reaches ``V + work``, so a batch change costs one heap operation instead of touching every sequence.
Events (arrivals, completions, cold starts, drains, scrapes, control ticks) are processed in time
order from one heap, ties broken by insertion order, so the same inputs give the same numbers.

See docs/simulator.md for the equations and the assumptions.
"""

from __future__ import annotations

import itertools
import math
import random
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heappop, heappush
from operator import attrgetter
from typing import Protocol, cast

from ..api.policy import PriorityClass, default_classes
from ..api.variants import serving_split
from .curve import BatchCurve
from .flow import FlowControl, RoutingChoice, band_of, engine_rank, picker_key, pool_saturated, routing_layers
from .metrics import MetricStore, Scrape
from .result import ReplicaLife, Result, TimelinePoint
from .traces import HOUR, Trace
from .variants import SimVariant, draw

STARTING, SERVING, DRAINING = "starting", "serving", "draining"
# Event kinds, in the order they run when they fall on the same instant as each other.
_DONE, _READY, _DRAINED, _SCRAPE, _CONTROL, _END = range(6)
# Tolerance, in decode tokens, for a sequence whose virtual finish the clock reached up to rounding.
_EPSILON_TOKENS = 1e-6

FAIL_NO_REPLICA = "no serving replica"
FAIL_TIMEOUT = "timed out in queue"
FAIL_DRAIN = "cut off by a drain"
FAIL_OOM = "lost in an out-of-memory crash"
FAIL_SHED = "shed by the picker: its class's queue was full"
FAIL_EXPIRED = "expired in the picker's queue"


@dataclass(frozen=True)
class EngineModel:
    """How one replica behaves; every number here is an assumption the docs explain."""

    curve: BatchCurve = field(default_factory=BatchCurve)
    max_batch: int = 32
    reference_prompt_tokens: float = 512.0
    """The curve's first-token latency is for this prompt length; prefill scales linearly with the
    prompt (0 turns the scaling off)."""
    cold_start: float = 240.0
    """Seconds from creating a replica (new or restarted) until it serves: scheduling, image, weights."""
    request_timeout: float = 60.0
    """A client gives up on a request that has not been admitted to a batch after this long."""
    fragmentation_idle_per_hour: float = 0.005
    fragmentation_busy_per_hour: float = 0.042
    """Fragmentation grows at idle + (busy - idle) x utilization per hour: 28 % after 12 h at 50 %."""
    penalty_start: float = 0.15
    """Fragmentation beyond this eats memory the engine uses (default: the spec's reserve fraction)."""
    slowdown_per_fragmentation: float = 4.0
    """Step time grows by this much per unit of fragmentation past ``penalty_start``."""
    oom_fragmentation: float = 0.40
    """At this fragmentation the engine runs out of memory and crashes (default: reserve + dynamic)."""

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {self.max_batch}")
        if self.cold_start < 0 or self.request_timeout <= 0:
            raise ValueError("cold_start must be >= 0 and request_timeout > 0")

    def slowdown(self, fragmentation: float) -> float:
        """Factor on step time (and first-token latency) at a fragmentation level."""
        return 1.0 + max(0.0, fragmentation - self.penalty_start) * self.slowdown_per_fragmentation

    def utilization(self, batch: float) -> float:
        """NPU utilization at a batch occupancy: the share of the full batch's decode throughput in use."""
        return min(1.0, self.curve.throughput(batch) / self.curve.throughput(self.max_batch))

    def fragmentation(self, seconds_up: float, busy_seconds: float) -> float:
        """Fragmentation after ``seconds_up`` of serving, ``busy_seconds`` of which at full utilization."""
        idle, busy = self.fragmentation_idle_per_hour, self.fragmentation_busy_per_hour
        return (idle * seconds_up + (busy - idle) * busy_seconds) / HOUR


@dataclass(frozen=True)
class FleetConfig:
    """The fleet around the engines: its size, bounds, cost unit and how it is observed."""

    engine: EngineModel = field(default_factory=EngineModel)
    npus_per_replica: int = 8
    initial_replicas: int = 2
    min_replicas: int = 1
    max_replicas: int = 8
    drain_seconds: float = 30.0
    scrape_interval: float = 15.0
    metric_retention: float = 3600.0
    routing: RoutingChoice = "pool"
    """How requests reach replicas: the layers of ``flow.py`` (a Service, the endpoint picker, its classes in
    either order, the classes' priority inside the engines)."""
    classes: tuple[PriorityClass, ...] = field(default_factory=lambda: tuple(default_classes()))
    """The fleet's priority classes (``spec.routing.classes``), for the classed routings."""
    variants: tuple[SimVariant, ...] = ()
    """``spec.variants``: replica i runs variant i mod their number; requests split by ``traffic``."""
    traffic: tuple[tuple[str, int], ...] = ()
    """The split the run starts with, in percent per variant."""


@dataclass(frozen=True)
class ReplicaView:
    """What a policy may know about a replica: what the Kubernetes API would show."""

    index: int
    state: str
    created: float
    ready_at: float | None


@dataclass(frozen=True)
class FleetView:
    """The fleet as a policy sees it at a control tick."""

    now: float
    desired: int
    replicas: tuple[ReplicaView, ...]
    metrics: MetricStore
    config: FleetConfig
    traffic: tuple[tuple[str, int], ...] = ()

    @property
    def serving(self) -> list[ReplicaView]:
        return [r for r in self.replicas if r.state == SERVING]


@dataclass(frozen=True)
class TickDecision:
    """A policy's answer at a tick: a new replica count (or None to keep it) and replicas to restart."""

    replicas: int | None = None
    restart: tuple[int, ...] = ()
    traffic: tuple[tuple[str, int], ...] | None = None  # a new split between the variants


class FleetPolicy(Protocol):
    """Steers the fleet: asked for a decision every ``interval`` seconds."""

    name: str
    interval: float

    def decide(self, view: FleetView) -> TickDecision: ...


class _Replica:
    """A replica's mutable state; ``_Simulation`` is the only code that touches it."""

    __slots__ = (
        "index",
        "created",
        "ready_at",
        "state",
        "active",
        "waiting",
        "load",
        "vclock",
        "last",
        "rate",
        "util",
        "busy",
        "busy_at_scrape",
        "scraped_at",
        "slowdown",
        "version",
        "restart",
        "variant",
        "speed",
    )

    def __init__(self, index: int, created: float) -> None:
        self.index = index
        self.created = created
        self.ready_at: float | None = None
        self.state = STARTING
        self.active: list[tuple[float, int]] = []  # heap of (virtual finish, request id)
        # First come, first served; a heap of (rank, id) with engine priority (``_Simulation._create``).
        self.waiting: deque[int] | list[tuple[int, int]] = deque()
        self.load = 0  # requests routed here and not yet finished or failed
        self.vclock = 0.0  # decode tokens each running sequence has received so far
        self.last = created  # when vclock and busy were last brought up to date
        self.rate = 0.0  # decode tokens per second per running sequence, now
        self.util = 0.0
        self.busy = 0.0  # integral of utilization over time since ready
        self.busy_at_scrape = 0.0
        self.scraped_at = created
        self.slowdown = 1.0
        self.version = 0  # bumps on every reschedule; stale completion events carry an older one
        self.restart = False  # recreate this index once the drain ends
        self.variant: str | None = None  # its precision variant (spec.variants), None without
        self.speed = 1.0  # its variant's speed over the batch curve


def simulate(config: FleetConfig, trace: Trace, policy: FleetPolicy) -> Result:
    """Run ``trace`` through a fleet steered by ``policy`` and return what happened."""
    return _Simulation(config, trace, policy).run()


class _Simulation:
    def __init__(self, config: FleetConfig, trace: Trace, policy: FleetPolicy) -> None:
        self.config, self.trace, self.policy = config, trace, policy
        engine = config.engine
        self.max_batch = engine.max_batch
        rates, first_tokens, _ = engine.curve.table(engine.max_batch)
        self.rate_table = rates
        self.first_token_table = first_tokens
        self.util_table = [engine.utilization(b) for b in range(engine.max_batch + 1)]
        n = len(trace)
        nan = math.nan
        self.result = Result(
            policy=policy.name,
            trace=trace.name,
            duration=trace.duration,
            npus_per_replica=config.npus_per_replica,
            arrivals=array("d", trace.arrivals),
            output_tokens=trace.output_tokens,
            first_token=array("d", [nan]) * n,
            end_to_end=array("d", [nan]) * n,
            served_by=array("i", [-1]) * n,
            failures={},
            variants=config.variants,
        )
        self.metrics = MetricStore(config.metric_retention)
        self.events: list = []
        self.seq = itertools.count()
        self.replicas: dict[int, _Replica] = {}  # every replica object that exists, by index
        self.serving: list[_Replica] = []  # in index order, so routing ties go to the lowest index
        self.desired = config.initial_replicas
        self.ended = False
        layers = routing_layers(config.routing, config.classes)
        self.engine_priority = layers.engine_priority
        # A Service chooses at random; the picker chooses, and with bands holds what saturated engines cannot take.
        self.rng = random.Random(0) if not layers.picker else None
        self.flow = FlowControl(layers.bands, trace.arrivals) if layers.bands else None
        self.traffic = dict(config.traffic)
        self.draws = random.Random(1)  # the picker's weighted draw of each request's variant

    # ----- the event loop -----

    def run(self) -> Result:
        for index in range(self.desired):
            self._start_serving(self._create(index, 0.0), 0.0)  # the run starts with a warm fleet
        # The first scrape and the first control tick come one period in, when there is something to see.
        self._push(self.config.scrape_interval, _SCRAPE, None)
        self._push(self.policy.interval, _CONTROL, None)
        self._push(self.trace.duration, _END, None)
        arrivals = self.trace.arrivals
        n, i = len(arrivals), 0
        next_arrival = arrivals[0] if n else math.inf
        events = self.events
        while events or i < n:
            if events and events[0][0] <= next_arrival:
                t, _, kind, replica, version = heappop(events)
                if kind == _DONE:
                    if replica.version == version:
                        self._complete(replica, t)
                else:
                    self._timer(kind, replica, t)
            else:
                self._arrive(i, next_arrival)
                i += 1
                next_arrival = arrivals[i] if i < n else math.inf
        return self.result

    def _push(self, t: float, kind: int, replica: _Replica | None) -> None:
        heappush(self.events, (t, next(self.seq), kind, replica, 0))

    def _timer(self, kind: int, replica: _Replica | None, t: float) -> None:
        if kind == _READY:
            if (
                replica is not None
                and self.replicas.get(replica.index) is replica
                and replica.state == STARTING
            ):
                self._start_serving(replica, t)
        elif kind == _DRAINED:
            # Not already gone (an OOM crash mid-drain); drain events always carry their replica.
            if replica is not None and self.replicas.get(replica.index) is replica:
                self._delete(replica, t, FAIL_DRAIN, "restarted" if replica.restart else "scaled in")
                self._reconcile(t)
        elif kind == _SCRAPE:
            if not self.ended:
                self._scrape(t)
                self._push(t + self.config.scrape_interval, _SCRAPE, None)
        elif kind == _CONTROL:
            if not self.ended:
                self._control(t)
                self._push(t + self.policy.interval, _CONTROL, None)
        elif kind == _END:
            self._end(t)

    # ----- requests -----

    def _arrive(self, rid: int, t: float) -> None:
        serving, flow = self.serving, self.flow
        if not serving:
            self._fail(rid, FAIL_NO_REPLICA)
        elif self.rng is not None:  # a Service: any serving replica, at random
            self._send(serving[self.rng.randrange(len(serving))], rid, t, 0)
        elif flow is None:  # the picker's choice alone
            self._pick(rid, t, 0)
        elif flow.offer(band_of(flow.bands, self.trace.prompt_tokens[rid]), rid):
            self._dispatch(t)
        else:
            self._fail(rid, FAIL_SHED)

    def _dispatch(self, t: float) -> None:
        """The picker's flow control: while the pool is not saturated, send held requests, highest band first."""
        flow = self.flow
        if flow is None or not flow.held:
            return
        for rid in flow.expire(t):
            self._fail(rid, FAIL_EXPIRED)
        serving = self.serving
        while flow.held and not pool_saturated([len(r.waiting) for r in serving]):
            rid, priority = cast("tuple[int, int]", flow.pop())
            self._pick(rid, t, engine_rank(priority))

    def _pick(self, rid: int, t: float, rank: int) -> None:
        """The picker's choice; with variants, among the replicas of the variant its rewrite drew."""
        pool = self.serving
        if self.traffic:
            # As the operator renders the rewrite: a variant with no serving replica lends its share.
            split = serving_split(self.traffic, {str(r.variant) for r in pool})
            variant = draw(self.draws, split)
            pool = [r for r in pool if r.variant == variant]
        if not pool:  # the variant filter left no endpoint: the picker refuses the request
            self._fail(rid, FAIL_NO_REPLICA)
        else:
            self._send(min(pool, key=_picker_key) if len(pool) > 1 else pool[0], rid, t, rank)

    def _send(self, replica: _Replica, rid: int, t: float, rank: int) -> None:
        """A request reaches an engine: into the batch if a slot is free and nobody waits, else its queue."""
        replica.load += 1
        if not replica.waiting and len(replica.active) < self.max_batch:
            self._advance(replica, t)
            self._admit(replica, rid, t)
            self._rebatch(replica, t)
        elif self.engine_priority:  # ``_create`` made the queue a heap of (rank, id)
            heappush(cast("list[tuple[int, int]]", replica.waiting), (rank, rid))
        else:
            cast("deque[int]", replica.waiting).append(rid)

    def _admit(self, replica: _Replica, rid: int, t: float) -> None:
        """Put a request in the batch: its first token comes after the prefill at the new batch size."""
        batch = len(replica.active) + 1
        reference = self.config.engine.reference_prompt_tokens
        prefill = self.first_token_table[batch]
        if reference > 0:
            prefill *= self.trace.prompt_tokens[rid] / reference
        result = self.result
        result.first_token[rid] = (t - self.trace.arrivals[rid]) + prefill * replica.slowdown / replica.speed
        result.served_by[rid] = replica.index
        # The prefill occupies the sequence's share of the batch like decode tokens would, so its
        # virtual work is the prefill time at the batch's undegraded per-sequence rate.
        work = self.trace.output_tokens[rid] + prefill * self.rate_table[batch]
        heappush(replica.active, (replica.vclock + work, rid))

    def _complete(self, replica: _Replica, t: float) -> None:
        self._advance(replica, t)
        active, result, arrivals = replica.active, self.result, self.trace.arrivals
        limit = replica.vclock + _EPSILON_TOKENS * max(1.0, replica.vclock)
        while active and active[0][0] <= limit:
            _, rid = heappop(active)
            result.end_to_end[rid] = t - arrivals[rid]
            replica.load -= 1
        self._fill(replica, t)
        self._rebatch(replica, t)
        self._dispatch(t)

    def _fill(self, replica: _Replica, t: float) -> None:
        """Admit waiting requests into free batch slots; drop those whose client gave up."""
        waiting, active, arrivals = replica.waiting, replica.active, self.trace.arrivals
        timeout, max_batch = self.config.engine.request_timeout, self.max_batch
        while waiting and len(active) < max_batch:
            # The queue's kind follows ``engine_priority`` (``_create``): a heap of (rank, id), else a deque.
            rid = (
                heappop(cast("list[tuple[int, int]]", waiting))[1]
                if self.engine_priority
                else cast("deque[int]", waiting).popleft()
            )
            if t - arrivals[rid] > timeout:
                replica.load -= 1
                self._fail(rid, FAIL_TIMEOUT)
                continue
            self._admit(replica, rid, t)

    def _fail(self, rid: int, reason: str) -> None:
        failures = self.result.failures
        failures[reason] = failures.get(reason, 0) + 1

    # ----- a replica's clock -----

    def _advance(self, replica: _Replica, t: float) -> None:
        """Bring the virtual clock and the busy integral up to ``t`` at the current rate."""
        dt = t - replica.last
        if dt > 0:
            replica.vclock += dt * replica.rate
            replica.busy += dt * replica.util
            replica.last = t

    def _rebatch(self, replica: _Replica, t: float) -> None:
        """Set the rate for the batch as it now is and schedule its next completion."""
        batch = len(replica.active)
        replica.version += 1
        replica.util = self.util_table[batch]
        if batch:
            replica.rate = self.rate_table[batch] * replica.speed / replica.slowdown
            due = t + max(0.0, replica.active[0][0] - replica.vclock) / replica.rate
            heappush(self.events, (due, next(self.seq), _DONE, replica, replica.version))
        else:
            replica.rate = 0.0
            replica.vclock = 0.0  # keeps the clock small, so rounding stays far below a token

    def _fragmentation(self, replica: _Replica, t: float) -> float:
        if replica.ready_at is None:
            return 0.0
        busy = replica.busy + max(0.0, t - replica.last) * replica.util
        return self.config.engine.fragmentation(t - replica.ready_at, busy)

    # ----- replica lifecycle -----

    def _create(self, index: int, t: float) -> _Replica:
        replica = _Replica(index, t)
        if variants := self.config.variants:
            replica.variant, replica.speed = (
                variants[index % len(variants)].name,
                variants[index % len(variants)].speed,
            )
        if self.engine_priority:
            replica.waiting = []  # a heap of (rank, request id)
        self.replicas[index] = replica
        return replica

    def _start_serving(self, replica: _Replica, t: float) -> None:
        replica.state = SERVING
        replica.ready_at = t
        replica.last = replica.scraped_at = t
        self.serving.append(replica)
        self.serving.sort(key=_index)
        self._dispatch(t)  # held requests may go to the new replica

    def _drain(self, replica: _Replica, t: float, restart: bool) -> None:
        """Take a replica out of the Service; its requests get ``drain_seconds`` to finish."""
        replica.restart = restart
        if replica.state == STARTING:
            self._delete(replica, t, FAIL_DRAIN, "restarted" if restart else "scaled in")
            return
        replica.state = DRAINING
        self.serving.remove(replica)
        self._push(t + self.config.drain_seconds, _DRAINED, replica)

    def _delete(self, replica: _Replica, t: float, reason: str, end: str) -> None:
        """Delete a replica: whatever it still holds fails with ``reason``; its NPUs stop costing."""
        lost = len(replica.active) + len(replica.waiting)
        if lost:
            self.result.failures[reason] = self.result.failures.get(reason, 0) + lost
            for _, rid in replica.active:
                self.result.first_token[rid] = math.nan
        replica.active.clear()
        replica.waiting.clear()
        replica.load = 0
        replica.version += 1  # its pending completion event is now stale
        if replica in self.serving:
            self.serving.remove(replica)
        if self.replicas.get(replica.index) is replica:
            del self.replicas[replica.index]
        if not self.ended:
            self._bill(replica, t)
            self.result.lives.append(ReplicaLife(replica.index, replica.created, replica.ready_at, t, end))

    def _bill(self, replica: _Replica, t: float) -> None:
        self.result.npu_seconds += (t - replica.created) * self.config.npus_per_replica

    def _reconcile(self, t: float) -> None:
        """What the operator's reconciler does: drain replicas above the count, create missing ones."""
        for index, replica in sorted(self.replicas.items()):
            if index >= self.desired and replica.state != DRAINING:
                self._drain(replica, t, restart=False)
        for index in range(self.desired):
            if index not in self.replicas:
                replica = self._create(index, t)
                self._push(t + self.config.engine.cold_start, _READY, replica)

    def _crash(self, replica: _Replica, t: float) -> None:
        """Out of memory: the engine dies with everything it holds; the gang is recreated cold."""
        self.result.oom_crashes += 1
        self._delete(replica, t, FAIL_OOM, "out of memory")
        self._reconcile(t)

    # ----- observation and control -----

    def _scrape(self, t: float) -> None:
        engine = self.config.engine
        values: dict[int, tuple[float, float]] = {}
        crashed = []
        for replica in list(self.replicas.values()):
            if replica.state == STARTING:
                continue
            self._advance(replica, t)
            span = t - replica.scraped_at
            util = (replica.busy - replica.busy_at_scrape) / span if span > 0 else replica.util
            replica.busy_at_scrape, replica.scraped_at = replica.busy, t
            fragmentation = self._fragmentation(replica, t)
            values[replica.index] = (util, fragmentation)
            if fragmentation >= engine.oom_fragmentation:
                crashed.append(replica)
                continue
            slowdown = engine.slowdown(fragmentation)
            if slowdown != replica.slowdown:
                replica.slowdown = slowdown
                self._rebatch(replica, t)
        self.metrics.add(Scrape(t, values))
        self._record(t, values)
        for replica in crashed:
            self._crash(replica, t)

    def _record(self, t: float, values: dict[int, tuple[float, float]]) -> None:
        serving = [values[r.index][0] for r in self.serving if r.index in values]
        self.result.timeline.append(
            TimelinePoint(
                time=t,
                desired=self.desired,
                replicas=len(self.replicas),
                serving=len(serving),
                utilization=sum(serving) / len(serving) if serving else 0.0,
                fragmentation=max((v[1] for v in values.values()), default=0.0),
            )
        )

    def _control(self, t: float) -> None:
        views = tuple(
            ReplicaView(r.index, r.state, r.created, r.ready_at)
            for r in sorted(self.replicas.values(), key=_index)
        )
        now = tuple(self.traffic.items())
        decision = self.policy.decide(FleetView(t, self.desired, views, self.metrics, self.config, now))
        if decision.traffic is not None:
            self.traffic = dict(decision.traffic)
        if decision.replicas is not None:
            wanted = max(decision.replicas, 0)
            if wanted > self.desired:
                self.result.scale_ups += 1
            elif wanted < self.desired:
                self.result.scale_downs += 1
            self.desired = wanted
        for index in decision.restart:
            replica = self.replicas.get(index)
            if replica is not None and replica.state == SERVING:
                self.result.rule_restarts += 1
                self._drain(replica, t, restart=True)
        self._reconcile(t)

    def _end(self, t: float) -> None:
        """Stop billing and observing; requests already admitted still run to completion."""
        for replica in self.replicas.values():
            self._bill(replica, t)
            self.result.lives.append(
                ReplicaLife(replica.index, replica.created, replica.ready_at, None, "running")
            )
        self.ended = True


def _picker_key(replica: _Replica) -> tuple[bool, int]:
    return picker_key(len(replica.waiting), replica.load)


_index: Callable[[_Replica], int] = attrgetter("index")
