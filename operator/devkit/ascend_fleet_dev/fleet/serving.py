"""A simulated engine that serves requests: the OpenAI API over a continuously batching model.

Each serving leader of the dev cluster runs one :class:`BatchingEngine` behind
:func:`~ascend_fleet_dev.fleet.openai.openai_app`.
The engine reads its limits from the pod's own command line, as the real engine would:

- batch slots: vLLM ``--max-num-seqs``, SGLang ``--max-running-requests`` (default 256 for both);
- queue limit: SGLang ``--max-queued-requests`` (a full queue answers 503 "The request queue is full.";
  with priority scheduling a newcomer that is strictly preferred evicts the least preferred waiting
  request instead, as SGLang does). vLLM has no queue limit: its queue grows without bound;
- order of the queue: first come, first served, unless priority scheduling is on (vLLM
  ``--scheduling-policy priority``: lower ``priority`` first; SGLang ``--enable-priority-scheduling``:
  higher first, lower first with ``--schedule-low-priority-values-first``), and vllm-ascend's
  short-request-first scheduler (``--additional-config`` ``scheduler_config.short_request_first_config``:
  prompts up to ``threshold`` tokens go first, a longer one waiting over ``long_max_wait_ms`` goes
  before them).

Timing follows the batch curve (:class:`~ascend_fleet.simulate.curve.BatchCurve`, the seeds' table by
default), exactly as the fleet simulator models it: a request admitted into a batch of ``b`` sequences
gets its first token after the curve's first-token latency at ``b``, scaled by its prompt length over
512 tokens (the curve's reference prompt); after that every running sequence decodes at
``throughput(b) / b`` tokens per second. Tokens are due by the wall clock, not counted per loop turn,
so a slow event loop delivers several tokens in one chunk instead of slowing the engine down.
A prompt's length in tokens is its number of whitespace-separated words (or the length of a list of
token ids); the answer is always ``max_tokens`` long (default 16), as with ``ignore_eos``.

The engine keeps the counters and histograms the real engine exports (same names, labels and
buckets), and its gauges (running, waiting, KV-cache use) replace the synthetic scenario's values
while it has served a request within the last :data:`REAL_TRAFFIC_WINDOW` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import shlex
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from ascend_fleet.engines import Dialect, EngineFacts, engine_types, facts_of
from ascend_fleet.engines.base import SHORT_REQUEST_FIRST
from ascend_fleet.simulate.curve import BatchCurve

DEFAULT_MAX_RUNNING = 256
DEFAULT_MAX_TOKENS = 16
REFERENCE_PROMPT_TOKENS = 512.0
# KV-cache capacity in tokens: what a 64-GB 910B keeps for a 7B model after weights at the seeds' split.
KV_CAPACITY_TOKENS = 262_144
KV_BLOCK_TOKENS = 128  # vllm-ascend's block size
# Real-request gauges stand in for the synthetic scenario this long after the last request.
REAL_TRAFFIC_WINDOW = 30.0
# The longest the batching loop sleeps while sequences run: streamed tokens go out at least this often.
_TICK = 0.02
_QUEUE_FULL = "The request queue is full."
_EVICTED = "The request is aborted by a higher priority request."
_SHUTTING_DOWN = "the engine is shutting down"
_DRAIN_POLL_SECONDS = 0.05
WORDS = ("the", "fleet", "serves", "tokens", "on", "ascend", "npus", "in", "batches", "of", "many")


def imitated_engines() -> list[EngineFacts]:
    """The registered engines the dev cluster can imitate: those whose facts carry a :class:`Dialect`."""
    return [facts for facts in map(facts_of, engine_types()) if facts.dialect is not None]


def imitated_facts(engine: str) -> EngineFacts:
    """The facts of the imitated engine a command word names (``vllm``, ``sglang``)."""
    return next(facts for facts in imitated_engines() if _dialect(facts).command_word == engine)


def _dialect(facts: EngineFacts) -> Dialect:
    assert facts.dialect is not None, f"{facts.type} has no dialect to imitate"
    return facts.dialect


def dialect_of(engine: str) -> Dialect:
    """How the imitated engine a command word names speaks."""
    return _dialect(imitated_facts(engine))


def series_labels(dialect: Dialect, model_name: str) -> dict[str, str]:
    """The labels the engine puts on its own series, on the one rank a simulated engine has."""
    return {"model_name": model_name, **dict.fromkeys(dialect.series_labels, "0")}


# The first registered engine (vllm-ascend) is the default: its multi-pod workers run only ``ray start``.
DEFAULT_ENGINE = _dialect(imitated_engines()[0]).command_word


# Configuration from the command line ---------------------------------------------------------


@dataclass(frozen=True)
class ShortRequestFirst:
    """vllm-ascend's short-request-first scheduler: short prompts first, long ones aged in."""

    threshold: int
    long_max_wait: float


@dataclass(frozen=True)
class EngineConfig:
    """What the simulated engine takes from its command line."""

    engine: str = DEFAULT_ENGINE  # the command word of the imitated engine
    model_name: str = "model"
    port: int | None = None
    max_running: int = DEFAULT_MAX_RUNNING
    max_queued: int | None = None
    priority_scheduling: bool = False
    low_priority_first: bool = True
    short_first: ShortRequestFirst | None = None
    curve: BatchCurve = field(default_factory=BatchCurve)
    kv_capacity_tokens: int = KV_CAPACITY_TOKENS

    def preference(self, priority: int) -> int:
        """A sort key: smaller is served first."""
        if not self.priority_scheduling:
            return 0
        return priority if self.low_priority_first else -priority


def engine_config(words: Sequence[str], *, engine: str, default_model: str) -> EngineConfig:
    """The engine's settings from its argv (``vllm serve ...`` or ``python -m sglang.launch_server ...``).

    Flags are read as the engines spell them (``--flag value`` or ``--flag=value``); anything else is
    ignored, since the engine's own parser, not this simulator, is the judge of a command line.
    """
    flags = _flags(words)
    model = flags.get("--served-model-name") or default_model
    port = _int(flags.get("--port"))
    facts = imitated_facts(engine)
    dialect = _dialect(facts)
    priority_flag, priority_value = dialect.priority_flag
    low_first_flag = dialect.low_priority_first_flag
    short_first = SHORT_REQUEST_FIRST in facts.features
    return EngineConfig(
        engine=engine,
        model_name=model,
        port=port,
        max_running=_int(flags.get(facts.spelling.max_batch_size)) or DEFAULT_MAX_RUNNING,
        max_queued=_int(flags.get(dialect.max_queued_flag)) if dialect.max_queued_flag else None,
        priority_scheduling=flags.get(priority_flag) == priority_value
        if priority_value
        else priority_flag in flags,
        low_priority_first=low_first_flag is None or low_first_flag in flags,
        short_first=_short_first(flags.get("--additional-config")) if short_first else None,
    )


def _flags(words: Sequence[str]) -> dict[str, str]:
    """``--name value`` pairs (a bare flag maps to ``""``); the last occurrence wins, as argparse does."""
    found: dict[str, str] = {}
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        if "=" in word:
            name, value = word.split("=", 1)
        else:
            following = words[index + 1] if index + 1 < len(words) else ""
            name, value = word, ("" if following.startswith("--") else following)
        found[name] = value
    return found


def _short_first(text: str | None) -> ShortRequestFirst | None:
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return None
    section = ((config or {}).get("scheduler_config") or {}).get("short_request_first_config") or {}
    if not section.get("enabled"):
        return None
    return ShortRequestFirst(
        int(section.get("threshold", 256)), float(section.get("long_max_wait_ms", 2000)) / 1e3
    )


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def command_words(items: Iterable[str]) -> list[str]:
    """Words of a container's command and args: argv items as they are, a shell's ``-c`` script split.

    Only a script is split (``bash -c "ray start ... && exec vllm serve ..."``): an argv item such as an
    ``--additional-config`` JSON reaches the engine whole, spaces and quotes included.
    """
    words: list[str] = []
    items = [str(item) for item in items]
    for index, item in enumerate(items):
        script = index >= 2 and items[index - 1] == "-c" and items[index - 2].rsplit("/", 1)[-1] in _SHELLS
        if not script:
            words.append(item)
            continue
        try:
            words += shlex.split(item)
        except ValueError:
            words += item.split()
    return words


_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}


# The engine ----------------------------------------------------------------------------------


class EngineRejected(Exception):
    """The engine refused a request; ``status`` is the HTTP status it answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(eq=False)
class EngineRequest:
    """One request inside the engine."""

    prompt_tokens: int
    max_tokens: int
    priority: int
    arrival: float
    order: int
    admitted: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    generated: float = 0.0
    rejected: EngineRejected | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def tokens(self) -> int:
        """Tokens produced so far."""
        return min(self.max_tokens, math.floor(self.generated + 1e-9))

    @property
    def done(self) -> bool:
        return self.finished_at is not None or self.rejected is not None


class BatchingEngine:
    """Continuous batching over the batch curve, on the asyncio loop it is created on.

    Every method must run on that loop. :meth:`snapshot` may be called from other threads: it reads
    a tuple the loop replaces after each change.
    """

    def __init__(self, config: EngineConfig, *, clock=time.monotonic, wall=time.time) -> None:
        self.config = config
        self._clock = clock
        self._wall = wall
        self._waiting: list[EngineRequest] = []
        self._running: list[EngineRequest] = []
        self._order = itertools.count()
        self._last = clock()
        self._last_request: float | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._draining = False
        self._closed = False
        self._snapshot: tuple[int, int, float, float] = (0, 0, 0.0, 0.0)
        self.received = 0  # requests submitted, accepted or not: which replica a router chose
        self.registry = CollectorRegistry(auto_describe=True)
        self._metrics = _EngineMetrics(config, self.registry)

    # Requests ---------------------------------------------------------------------------

    def submit(self, prompt_tokens: int, max_tokens: int, priority: int = 0) -> EngineRequest:
        """Queue a request; raise :class:`EngineRejected` when the engine refuses it."""
        if self._draining:
            raise EngineRejected(503, _SHUTTING_DOWN)
        if prompt_tokens + max_tokens > self.config.kv_capacity_tokens:
            raise EngineRejected(400, f"The prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) "
                                      f"exceeds the KV cache of {self.config.kv_capacity_tokens} tokens.")  # fmt: skip
        now = self._clock()
        self._advance(now)
        self._last_request = now
        self.received += 1
        seq = EngineRequest(max(1, prompt_tokens), max(1, max_tokens), priority, now, next(self._order))
        limit = self.config.max_queued
        if limit is not None and len(self._waiting) >= limit:
            victim = self._eviction_candidate(seq)
            if victim is None:
                self._metrics.aborted()
                raise EngineRejected(503, _QUEUE_FULL)
            self._waiting.remove(victim)
            victim.rejected = EngineRejected(503, _EVICTED)
            victim.changed.set()
            self._metrics.aborted()
        self._waiting.append(seq)
        self._fill(now)
        self._publish()
        self._ensure_running()
        return seq

    def cancel(self, seq: EngineRequest) -> None:
        """Drop a request whose client went away, freeing its batch slot."""
        if seq.done:
            return
        now = self._clock()
        self._advance(now)
        if seq in self._waiting:
            self._waiting.remove(seq)
        if seq in self._running:
            self._running.remove(seq)
        seq.rejected = EngineRejected(499, "client closed the request")
        self._fill(now)
        self._publish()

    async def wait(self, seq: EngineRequest, seen: int) -> int:
        """Wait until ``seq`` has more than ``seen`` tokens or is done; return its token count."""
        while seq.tokens <= seen and not seq.done:
            seq.changed.clear()
            await seq.changed.wait()
        if seq.rejected is not None:
            raise seq.rejected
        return seq.tokens

    def snapshot(self) -> tuple[int, int, float, float]:
        """Running requests, waiting requests, KV-cache usage (0..1) and NPU utilization (0..1)."""
        return self._snapshot

    def serving_real_traffic(self) -> bool:
        """Whether real requests drive the gauges: one is in flight or came in the last window."""
        if self._running or self._waiting:
            return True
        return self._last_request is not None and self._clock() - self._last_request < REAL_TRAFFIC_WINDOW

    async def drain(self, seconds: float) -> None:
        """Refuse new requests and give those in flight up to ``seconds`` to finish, as vLLM's server does on
        SIGTERM (new requests get 503 while the running ones complete); :meth:`close` cuts off what is left."""
        self._draining = True
        deadline = asyncio.get_running_loop().time() + seconds
        while self._serving() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(_DRAIN_POLL_SECONDS)

    def _serving(self) -> bool:
        return bool(self._waiting or self._running) and not self._closed

    async def close(self) -> None:
        """Stop the batching loop; requests still in flight are cut off."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for seq in [*self._waiting, *self._running]:
            seq.rejected = EngineRejected(503, _SHUTTING_DOWN)
            seq.changed.set()

    # The batching loop ------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    async def _run(self) -> None:
        while True:
            now = self._clock()
            self._advance(now)
            self._finish(now)
            self._fill(now)
            self._publish()
            if not self._running:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_event(now) - now)

    def _next_event(self, now: float) -> float:
        """When the loop must look again: a first token, a completion, or the next tick."""
        due = now + _TICK
        rate = self.config.curve.per_sequence_rate(len(self._running))
        for seq in self._running:
            if seq.first_token_at is not None and seq.first_token_at > now:
                due = min(due, seq.first_token_at)
            elif rate > 0:
                due = min(due, now + max(0.0, seq.max_tokens - seq.generated) / rate)
        return max(due, now + 0.001)

    def _advance(self, now: float) -> None:
        """Give every decoding sequence its tokens for the time since the last step, at the batch's rate."""
        last, self._last = self._last, now
        if not self._running or now <= last:
            return
        rate = self.config.curve.per_sequence_rate(len(self._running))
        for seq in self._running:
            start = seq.first_token_at
            if start is None or start > now:
                continue
            before = seq.tokens
            if seq.generated == 0.0:
                seq.generated = 1.0  # the prefill ends with the first token
            seq.generated = min(float(seq.max_tokens), seq.generated + rate * (now - max(last, start)))
            if seq.tokens > before:
                seq.changed.set()

    def _finish(self, now: float) -> None:
        done = [seq for seq in self._running if seq.tokens >= seq.max_tokens]
        for seq in done:
            self._running.remove(seq)
            seq.finished_at = now
            self._metrics.finished(seq)
            seq.changed.set()

    def _fill(self, now: float) -> None:
        """Admit waiting requests into free batch slots, in the scheduler's order, while the KV cache has room."""
        while self._waiting and len(self._running) < self.config.max_running:
            seq = min(self._waiting, key=lambda s: self._queue_key(s, now))
            if self._kv_used() + seq.prompt_tokens + seq.max_tokens > self.config.kv_capacity_tokens:
                return
            self._waiting.remove(seq)
            self._admit(seq, now)

    def _admit(self, seq: EngineRequest, now: float) -> None:
        self._running.append(seq)
        seq.admitted = now
        prefill = (
            self.config.curve.first_token(len(self._running)) * seq.prompt_tokens / REFERENCE_PROMPT_TOKENS
        )
        seq.first_token_at = now + prefill
        self._wake.set()

    def _queue_key(self, seq: EngineRequest, now: float) -> tuple:
        """Smaller goes first: the priority (if on), then short-request-first's classes, then arrival."""
        short = self.config.short_first
        if short is None:
            lane = 0
        elif seq.prompt_tokens > short.threshold:
            # A long prompt that waited past the limit overtakes the short ones.
            lane = -1 if now - seq.arrival > short.long_max_wait else 1
        else:
            lane = 0
        return (self.config.preference(seq.priority), lane, seq.order)

    def _eviction_candidate(self, newcomer: EngineRequest) -> EngineRequest | None:
        """With priority scheduling, the least preferred waiting request, if the newcomer is strictly preferred."""
        if not self.config.priority_scheduling or not self._waiting:
            return None
        preference = self.config.preference
        worst = max(self._waiting, key=lambda s: (preference(s.priority), s.order))
        return worst if preference(newcomer.priority) < preference(worst.priority) else None

    def _kv_used(self) -> float:
        return sum(seq.prompt_tokens + seq.generated for seq in self._running)

    def _publish(self) -> None:
        batch = len(self._running)
        curve = self.config.curve
        utilization = min(1.0, curve.throughput(batch) / curve.throughput(self.config.max_running))
        kv = min(1.0, self._kv_used() / self.config.kv_capacity_tokens)
        self._snapshot = (batch, len(self._waiting), kv, utilization)


class _EngineMetrics:
    """The engine's counters and histograms, named and labelled as the real engine does."""

    def __init__(self, config: EngineConfig, registry: CollectorRegistry) -> None:
        facts = imitated_facts(config.engine)
        dialect, series = _dialect(facts), facts.metrics
        labels = series_labels(dialect, config.model_name)
        prefix = dialect.metric_prefix
        names, values = list(labels), list(labels.values())

        def histogram(name: str, text: str, buckets: Sequence[float]) -> Any:
            return Histogram(name, text, names, buckets=buckets, registry=registry).labels(*values)

        def counter(name: str, text: str) -> Any:
            return Counter(name, text, names, registry=registry).labels(*values)

        self.ttft = histogram(series.ttft_histogram, "Time to first token in seconds.", dialect.ttft_buckets)
        self.e2e = histogram(
            series.e2e_latency_histogram, "End-to-end request latency in seconds.", dialect.e2e_buckets
        )
        self.queue = histogram(
            series.queue_time_histogram,
            "Time requests spent waiting in the queue, in seconds.",
            dialect.queue_buckets,
        )
        self.tpot = histogram(
            series.tpot_histogram, "Time per output token after the first, in seconds.", dialect.tpot_buckets
        )
        self.tpot_per_token = dialect.tpot_per_token
        self.prompt = counter(f"{prefix}prompt_tokens", "Prefill tokens processed.")
        self.generation = counter(f"{prefix}generation_tokens", "Generation tokens processed.")
        if dialect.cache_config_info:
            # The engine's cache description; the endpoint picker reads the block size for prefix-cache scoring.
            info = Gauge(f"{prefix}cache_config_info", "Information of the LLMEngine CacheConfig.",
                         ["block_size", "num_gpu_blocks", "engine"], registry=registry)  # fmt: skip
            info.labels(str(KV_BLOCK_TOKENS), str(config.kv_capacity_tokens // KV_BLOCK_TOKENS), "0").set(1)
        finished = f"{prefix}{dialect.finished_requests}"
        if dialect.finished_reason:
            requests = Counter(finished, "Requests finished.", [*names, "finished_reason"], registry=registry)
            self.requests = requests.labels(*values, "length")
        else:
            self.requests = counter(finished, "Requests finished.")
        aborted = dialect.aborted_requests
        self.aborts = counter(f"{prefix}{aborted}", "Requests aborted.") if aborted else None

    def finished(self, seq: EngineRequest) -> None:
        assert seq.first_token_at is not None and seq.admitted is not None and seq.finished_at is not None
        self.ttft.observe(seq.first_token_at - seq.arrival)
        self.e2e.observe(seq.finished_at - seq.arrival)
        self.queue.observe(seq.admitted - seq.arrival)
        # Tokens after the first: a per-request engine (vLLM) observes their mean once, 0 for a one-token answer;
        # a per-token engine (SGLang) observes each one's gap, here all at the simulated pace.
        after_first = seq.max_tokens - 1
        mean = (seq.finished_at - seq.first_token_at) / after_first if after_first > 0 else 0.0
        for _ in range(after_first if self.tpot_per_token else 1):
            self.tpot.observe(mean)
        self.prompt.inc(seq.prompt_tokens)
        self.generation.inc(seq.max_tokens)
        self.requests.inc()

    def aborted(self) -> None:
        if self.aborts is not None:
            self.aborts.inc()


def engine_metrics(engine: BatchingEngine) -> bytes:
    """The engine's counters and histograms in the text format."""
    return generate_latest(engine.registry)
