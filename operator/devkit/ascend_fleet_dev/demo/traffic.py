"""Requests for the demo fleet through its gateway, and what each priority class saw (``ascend-fleet dev --routing``).

A client as the routing docs describe one: Poisson arrivals at ``rate`` per second, prompts with the seeds'
length mix (log-normal, median 512 tokens, as the fleet simulator draws them) and short streamed answers; each
request names its class's InferenceObjective in the objective header, the class being the one whose
``minPromptTokens`` the prompt reaches. What it measures is what a client measures: time to the first
streamed token, answers refused (shed) and failed. :func:`window` turns the records into per-class figures over
the last seconds (pure).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp

from ascend_fleet.api.v1alpha1 import Routing
from ascend_fleet.render.picker_config import OBJECTIVE_HEADER, objective_name
from ascend_fleet.simulate.traces import PROMPT_MEDIAN, PROMPT_RANGE, PROMPT_SIGMA
from ascend_fleet_dev.demo.view import ClassFigures

SLOW_SECONDS = 1.0  # the seeds' long-tail line: a first token later than this is a slow request
OUTPUT_TOKENS = (8, 32)  # short answers: the demo shows queueing, not decode
SHED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Record:
    """One request as the client saw it."""

    at: float  # monotonic time it finished
    cls: str
    status: int  # 0: no answer (connection failed)
    first_token: float | None  # seconds to the first streamed token
    error: str = ""  # why a request failed: its status, or the client's exception when the answer broke off


def window(records: Iterable[Record], routing: Routing, now: float, seconds: float) -> list[ClassFigures]:
    """Per-class figures of the requests that finished in the last ``seconds`` before ``now`` (pure)."""
    recent = [r for r in records if now - seconds < r.at <= now]
    figures = []
    for priority_class in sorted(routing.classes, key=lambda c: -c.priority):
        mine = [r for r in recent if r.cls == priority_class.name]
        answered = [r.first_token for r in mine if r.status == 200 and r.first_token is not None]
        slow = sum(1 for first_token in answered if first_token > SLOW_SECONDS)
        failed = [r for r in mine if r.status not in SHED_STATUSES and (r.status != 200 or r.error)]
        figures.append(
            ClassFigures(
                name=priority_class.name,
                priority=priority_class.priority,
                per_second=len(mine) / seconds,
                slow_share=slow / len(answered) if answered else None,
                shed=sum(1 for r in mine if r.status in SHED_STATUSES),
                failed=len(failed),
                failures=_tally(r.error or str(r.status) for r in failed),
            )
        )
    return figures


def _tally(reasons: Iterable[str]) -> str:
    """``502 x2, ServerDisconnectedError``: each reason once, with its count where it repeats (pure)."""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(reason + (f" x{n}" if n > 1 else "") for reason, n in sorted(counts.items()))


class Traffic:
    """Sends the demo's requests to ``url`` on a thread of its own until :meth:`stop`."""

    def __init__(
        self,
        url: str,
        fleet: str,
        model: str,
        routing: Routing,
        *,
        rate: float,
        seed: int = 1,
        clock: Callable[[], float] = time.monotonic,
        keep_seconds: float = 120.0,
    ) -> None:
        self.url, self.fleet, self.model, self.routing, self.rate = url, fleet, model, routing, rate
        self._rng = random.Random(f"{seed}:demo-traffic")
        self._clock = clock
        self._keep = keep_seconds
        self._records: deque[Record] = deque()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="demo-traffic", daemon=True)
        self.sent = 0

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(15)

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def figures(self, seconds: float = 10.0) -> list[ClassFigures]:
        return window(self.records(), self.routing, self._clock(), seconds)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
            pending: set[asyncio.Task[None]] = set()
            while not self._stopping.is_set():
                try:
                    await asyncio.wait_for(self._stopping.wait(), self._rng.expovariate(self.rate))
                except TimeoutError:
                    task = asyncio.create_task(self._one(session))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _one(self, session: aiohttp.ClientSession) -> None:
        prompt = round(self._rng.lognormvariate(math.log(PROMPT_MEDIAN), PROMPT_SIGMA))
        prompt = min(max(prompt, PROMPT_RANGE[0]), PROMPT_RANGE[1])
        priority_class = self.routing.class_for(prompt) or self.routing.classes[-1]
        body = {
            "model": self.model,
            # Distinct prompts: identical ones would draw the picker's prefix-cache affinity to one replica.
            "prompt": " ".join([uuid.uuid4().hex, *["w"] * (prompt - 1)]),
            "max_tokens": self._rng.randint(*OUTPUT_TOKENS),
            "stream": True,
        }
        headers = {OBJECTIVE_HEADER: objective_name(self.fleet, priority_class)}
        self.sent += 1
        start, first, status, error = self._clock(), None, 0, ""
        try:
            async with session.post(self.url + "/v1/completions", json=body, headers=headers) as response:
                status = response.status
                async for line in response.content:
                    if first is None and line.startswith(b"data: "):
                        first = self._clock() - start
        except (TimeoutError, aiohttp.ClientError, OSError) as broken:
            # An answer that broke off after its status counts as failed, named by what broke it.
            error = type(broken).__name__ + (f" after {status}" if status else "")
            status = 0 if status == 200 else status
        record = Record(self._clock(), priority_class.name, status, first, error)
        with self._lock:
            self._records.append(record)
            while self._records and record.at - self._records[0].at > self._keep:
                self._records.popleft()
