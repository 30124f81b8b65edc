"""The routing layers between a client and the simulated engines: a Service, the endpoint picker, its classes.

Each layer is reduced to what decides where a request goes and when it starts; the engines behind them are the
model's (batch slots, prefill and decode from the batch curve). What the real layers do, and what is kept:

- ``service``: kube-proxy sends each connection to a serving replica at random; every engine queues what it
  cannot batch, first come, first served. Kept as is.
- ``pool``: the endpoint picker's choice (as ``render.picker_config.picker_config`` configures it): it filters out
  engines whose waiting queue reached the saturation depth (4) while another has room, then scores the rest
  by queue depth (weight 2) and KV-cache use (weight 2); the prefix scorer adds nothing for prompts that share
  no prefix. The two equal weights make "fewest requests waiting plus running" the score here: the running
  batch is what fills the KV cache. Requests wait in the engines' queues. The real picker reads gauges
  scraped every 50 ms; this one sees the engines as they are (see docs/simulator.md).
- ``classes``: the choice plus flow control, one band per class (``spec.routing.classes``, default the seeds'
  three by prompt length). A request's class is the one with the largest ``minPromptTokens`` its prompt
  reaches, as the server's classifier names it. While the pool is saturated (the mean over engines of
  waiting / depth at 1 or more) the picker holds requests and, as engines free places, sends them by strict
  priority between bands, first in first out inside one (late binding: a held request goes to whichever
  engine frees first). A band holding its ``maxQueue`` requests rejects the next (upstream flow control
  checks every band's capacity, so a small band sheds whatever its class); a held request expires after the
  picker's TTL (60 s).
- ``classes-seed-order``: the same classes ranked as the seed's code ran them, longest prompts first.
- ``classes-engine-priority``: ``classes`` with ``scheduling.priority``: the class's priority reaches each
  engine, whose own queue then serves higher classes first instead of first come, first served.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..api.policy import PriorityClass, default_classes
from ..api.units import parse_duration
from ..render.picker_config import REQUEST_TTL, SATURATION_QUEUE_DEPTH

RoutingChoice = Literal["service", "pool", "classes", "classes-seed-order", "classes-engine-priority"]
ROUTINGS: tuple[RoutingChoice, ...] = (
    "service",
    "pool",
    "classes",
    "classes-seed-order",
    "classes-engine-priority",
)
# bench/routing's one-class pool: one band large enough never to fill (``classes`` with it is the picker
# with late binding and nothing else).
ONE_CLASS = PriorityClass(name="all", priority=0, max_queue=100_000)
PICKER_TTL = parse_duration(REQUEST_TTL)


@dataclass(frozen=True)
class Layers:
    """What a routing choice turns on: the picker's choice, its bands, priority inside the engines."""

    picker: bool
    """The picker chooses the replica; otherwise one at random, as kube-proxy does."""
    bands: tuple[PriorityClass, ...] = ()
    """The picker's flow control, highest priority first; empty: requests are never held at the picker."""
    engine_priority: bool = False


def routing_layers(routing: RoutingChoice, classes: Sequence[PriorityClass] | None = None) -> Layers:
    """The layers of a routing choice, with ``classes`` (default: the seeds' three) for the classed ones."""
    classes = tuple(classes) if classes else tuple(default_classes())
    if routing == "service":
        return Layers(picker=False)
    if routing == "pool":
        return Layers(picker=True)
    if routing == "classes":
        return Layers(picker=True, bands=_by_priority(classes))
    if routing == "classes-seed-order":
        return Layers(picker=True, bands=_by_priority(seed_order(classes)))
    if routing == "classes-engine-priority":
        return Layers(picker=True, bands=_by_priority(classes), engine_priority=True)
    raise ValueError(f"unknown routing {routing!r}; use one of {', '.join(ROUTINGS)}")


def seed_order(classes: Sequence[PriorityClass]) -> tuple[PriorityClass, ...]:
    """The same classes ranked as the seed's code ran them: the longer a class's prompts, the higher it goes.

    The non-sheddable classes swap priorities by prompt length (the default long/medium/short get 2/1/0 for
    0/1/2); sheddable classes keep their negative priority, so they stay sheddable and last.
    """
    kept = [c for c in classes if not c.sheddable]
    ranked = sorted(kept, key=lambda c: c.min_prompt_tokens)
    priorities = sorted(c.priority for c in kept)
    moved = [c.model_copy(update={"priority": p}) for c, p in zip(ranked, priorities, strict=True)]
    return (*moved, *(c for c in classes if c.sheddable))


def _by_priority(classes: Sequence[PriorityClass]) -> tuple[PriorityClass, ...]:
    return tuple(sorted(classes, key=lambda c: -c.priority))


def band_of(bands: Sequence[PriorityClass], prompt_tokens: int) -> int:
    """The band of a prompt: its class is the one with the largest ``minPromptTokens`` the prompt reaches.

    A prompt no class admits (every threshold above it) goes to the lowest band, as a request the classifier
    cannot name is served after every named class.
    """
    best, reached = len(bands) - 1, -1
    for index, band in enumerate(bands):
        if reached < band.min_prompt_tokens <= prompt_tokens:
            best, reached = index, band.min_prompt_tokens
    return best


def picker_key(waiting: int, outstanding: int) -> tuple[bool, int]:
    """Sort key of a replica for the picker, smallest chosen: saturated ones last, then the fewest requests.

    The saturation filter passes over an engine with ``SATURATION_QUEUE_DEPTH`` waiting while any other has
    room; among the rest the queue and KV-cache scorers, weighted alike, favour the engine with the fewest
    requests waiting plus running. Ties go to the lowest index (the model's order; upstream breaks them at
    random, which changes which replica, not how many are busy).
    """
    return waiting >= SATURATION_QUEUE_DEPTH, outstanding


def pool_saturated(waiting: Sequence[int]) -> bool:
    """Whether flow control holds requests: the mean over engines of waiting / depth reaches 1.

    The detector's per-engine score is the larger of waiting / depth and KV-cache use / 0.9; the model has
    no KV-cache limit of its own (the batch limit stands for it), so the queue term is the score. With no
    engine at all the pool counts as saturated, as upstream's does.
    """
    return not waiting or sum(waiting) >= SATURATION_QUEUE_DEPTH * len(waiting)


def engine_rank(priority: int) -> int:
    """A request's place in an engine's priority queue, smallest first.

    The classifier writes the class's priority negated into the request, and the engines serve lower values
    first: higher classes go first, arrival order within a class.
    """
    return -priority


class FlowControl:
    """The picker's held requests: a FIFO per band, strict priority between bands, a capacity per band."""

    def __init__(self, bands: Sequence[PriorityClass], arrivals: Sequence[float], ttl: float = PICKER_TTL):
        self.bands = tuple(bands)
        self.queues: list[deque[int]] = [deque() for _ in self.bands]
        self.arrivals, self.ttl = arrivals, ttl
        self.held = 0

    def offer(self, band: int, rid: int) -> bool:
        """Hold a request in its band; False when the band already holds ``maxQueue`` (the request is shed)."""
        queue = self.queues[band]
        if len(queue) >= self.bands[band].max_queue:
            return False
        queue.append(rid)
        self.held += 1
        return True

    def expire(self, now: float) -> list[int]:
        """Take out the requests held longer than the TTL; each band is in arrival order, so from its head."""
        gone = []
        for queue in self.queues:
            while queue and now - self.arrivals[queue[0]] > self.ttl:
                gone.append(queue.popleft())
        self.held -= len(gone)
        return gone

    def pop(self) -> tuple[int, int] | None:
        """The next request to dispatch and its band's priority: the oldest of the highest non-empty band."""
        for band, queue in zip(self.bands, self.queues, strict=True):
            if queue:
                self.held -= 1
                return queue.popleft(), band.priority
        return None
