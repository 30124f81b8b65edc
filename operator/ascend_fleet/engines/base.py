"""What every engine is (its facts) and what every engine renders (its interface).

The facts are data: the engine's type, port, chips, default images, metric names, flag spellings and the
versions from which generated flags exist. The interface is the part of an engine pod that differs between
engines: the command line, the engine's own environment, the leader's rendezvous ports and the settings an
image's engine version cannot run. Everything else about a pod is the same for every engine and stays in
``render``.

This package sits below ``api`` (the API reads the facts to default ports and images and to state its
checks), so the interface takes the spec and the layout as the protocols in ``inputs``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal

from .inputs import EngineLayout, EngineSpec

EngineType = Literal["vllm-ascend", "sglang"]
Version = tuple[int, int, int]

# Feature names an engine's facts list: spec fields only some engines have.
SHORT_REQUEST_FIRST = "short-request-first"  # scheduling.policy short-request-first
PREFILL_DELAYER = "prefill-delayer"  # batching.prefillDelayer

# spec.engine.compilation.graphMode, in the API's words; each engine's CompilationFacts spells them its own way.
GRAPH_MODES = ("eager", "piecewise", "fullDecodeOnly")

_SHOWN_VALUE_CHARS = 60  # the longest generated value a refusal quotes
DTYPE = {"bf16": "bfloat16", "fp16": "float16"}

_TAG_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> Version:
    """``0.23.0`` (or ``0.23.0.post1``) as a comparable tuple."""
    major, minor, patch = (int(part) for part in text.split(".")[:3])
    return major, minor, patch


def format_version(version: Version) -> str:
    """A version tuple as people write it: ``0.23.0``."""
    return ".".join(str(part) for part in version)


def repository(image: str) -> str:
    """The image reference without its tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def tag_version(image: str) -> Version | None:
    """The version a ``v<x.y.z>`` tag names, or None for any other tag."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    match = _TAG_VERSION.match(tag)
    if match:
        return int(match.group(1)), int(match.group(2)), int(match.group(3))
    return None


@dataclass(frozen=True)
class Release:
    """One default upstream image and what it carries."""

    image: str
    version: str  # the engine release inside (vllm-ascend pairs with the vLLM of the same number)
    cann: str
    chips: tuple[str, ...]


@dataclass(frozen=True)
class Metrics:
    """The engine's own Prometheus series behind the catalog's engine entries (selectors included)."""

    queue_depth: str
    running_requests: str
    kv_cache_usage: str
    ttft_histogram: str
    queue_time_histogram: str
    e2e_latency_histogram: str
    # Time per output token after the first: vLLM observes each request's mean, SGLang each token's interval
    # (Dialect.tpot_per_token), so one p99 reads a request's mean on vLLM and a token's gap on SGLang.
    tpot_histogram: str


@dataclass(frozen=True)
class Spelling:
    """How one engine spells the settings every engine has."""

    quantization: str  # the --quantization value for ModelSlim int8 weights
    max_batch_size: str
    max_batch_tokens: str
    max_model_len: str


@dataclass(frozen=True)
class Dialect:
    """How the engine looks from outside beyond the catalog's series: what the dev cluster's simulated engine imitates."""

    command_word: str  # the word in a pod's command that names the engine
    metric_prefix: str  # the prefix of the engine's own series
    series_labels: tuple[str, ...]  # labels the engine adds to model_name on its own series ("0" on one rank)
    # Histogram bucket boundaries as the engine declares them, so histogram_quantile reads the same.
    ttft_buckets: tuple[float, ...]
    e2e_buckets: tuple[float, ...]
    queue_buckets: tuple[float, ...]
    tpot_buckets: tuple[float, ...]
    tpot_per_token: bool  # the TPOT histogram counts every output token, rather than each request once
    finished_requests: str  # the counter of finished requests, after the prefix
    finished_reason: bool  # whether that counter carries a finished_reason label
    aborted_requests: (
        str | None
    )  # the counter of aborted requests, after the prefix, where the engine has one
    cache_config_info: bool  # whether the engine describes its KV cache (block size) in cache_config_info
    error_at_top: bool  # an error body's fields at the top level, rather than under "error"
    max_queued_flag: str | None  # the flag bounding the waiting queue, where the engine has one
    priority_flag: tuple[
        str, str
    ]  # the flag (and value; "" for a bare flag) that turns priority scheduling on
    low_priority_first_flag: str | None  # the flag for "lower values first", or None where that is always so


@dataclass(frozen=True)
class KvConnector:
    """One way an engine moves the KV cache from a prefill instance to a decode instance."""

    name: str  # the engine's own spelling (vLLM's kv_connector, SGLang's transfer backend)
    since: Version  # the first engine release (of those read) that registers it
    # The connector refuses to start when the prefill instances' tensor size is below the decode instances'.
    prefill_tensor_at_least_decode: bool = False
    # The connector takes a single pipeline stage on the decode side.
    decode_single_stage: bool = False


@dataclass(frozen=True)
class KvTransfer:
    """What an engine needs to run as two roles, prefill and decode, with the KV cache moving between them."""

    connectors: tuple[KvConnector, ...]
    default_connector: dict[str, str]  # by chip
    port_name: str  # what the port is called in the engine's own words, for sentences
    # Where the engine's own transport takes ports at random: [base, base + per_npu x NPUs per node), or None.
    reserved_base: int | None = None
    reserved_per_npu: int = 0
    # True: each instance listens on port .. port + its NPUs; False: the one port.
    port_per_npu: bool = False
    fixed_default_port: int | None = None  # the default where it does not follow the reserved range

    def connector(self, name: str) -> KvConnector | None:
        """The connector of that name, or None where the engine has none."""
        return next((c for c in self.connectors if c.name == name), None)

    def reserved(self, npus_per_node: int) -> tuple[int, int] | None:
        """The engine's own port range on a node of this size (end exclusive), or None."""
        if self.reserved_base is None:
            return None
        return self.reserved_base, self.reserved_base + self.reserved_per_npu * npus_per_node

    def default_port(self, npus_per_node: int) -> int:
        """The first port past the engine's own range, or the engine's fixed default."""
        reserved = self.reserved(npus_per_node)
        if reserved is not None:
            return reserved[1]
        assert self.fixed_default_port is not None
        return self.fixed_default_port

    def ports_taken(self, port: int, npus_per_pod: int) -> range:
        """The ports one instance listens on for the transfer."""
        return range(port, port + npus_per_pod + 1) if self.port_per_npu else range(port, port + 1)


@dataclass(frozen=True)
class CompilationFacts:
    """What spec.engine.compilation becomes for one engine, each key as read in the engine's own source."""

    since: Version  # the oldest engine release read that has every option and key rendered for it
    source: str  # where the engine defines them, for sentences
    graph_modes: tuple[str, ...]  # the GRAPH_MODES the engine renders
    fusion: dict[str, str]  # fusion pass in the API's words -> the engine's own key; empty: none to name
    cache_env: str  # the variable naming the root of the engine's compile cache
    # Options that set what spec.engine.compilation sets: engine.args may not use them while it is set.
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineFacts:
    """Everything the operator knows about one engine that is not code."""

    type: str
    label: str  # the engine's name in sentences: vLLM, SGLang
    default_port: int
    chips: tuple[str, ...]
    chip_support: str  # the sentence part that says which chips the engine runs on
    releases: tuple[Release, ...]
    metrics: Metrics
    spelling: Spelling
    # Other spellings the engine's own parser accepts for a generated flag (``make test-engines`` checks them).
    aliases: dict[str, tuple[str, ...]]
    underscores: bool  # the parser reads ``--flag_name`` as ``--flag-name``
    tune_backend: str  # the benchmark client's ``--backend`` for this engine
    # The endpoint picker's metric extractor ``defaultEngine``, where the engine's metric names are not vLLM's.
    picker_engine: str | None = None
    health_path: str = "/health"  # what the leader's startup, readiness and liveness probes GET
    # Spec fields only some engines have (SHORT_REQUEST_FIRST, PREFILL_DELAYER).
    features: frozenset[str] = field(default_factory=frozenset)
    dialect: Dialect | None = None  # None: nothing in the dev cluster imitates the engine
    kv_transfer: KvTransfer | None = None  # None: the engine runs no prefill/decode split here
    # Options that set how many processes, NPUs and nodes an engine spans, or how its ranks find each other:
    # the operator plans those (spec.parallelism, spec.disaggregation), so engine.args may not set them even
    # where it generates none (a data-parallel size, say: each replica is an engine of its own).
    layout_flags: tuple[str, ...] = ()
    compilation: CompilationFacts | None = None  # None: spec.engine.compilation cannot be rendered
    # The parser reads ``--name.key value`` (and ``-cc.key`` for a short ``-cc``) as a key of the JSON option.
    dotted: bool = False
    # Short options the parser takes with their value joined on (``-O3`` is ``-O 3``).
    joined: tuple[str, ...] = ()

    def default_image(self, chip: str) -> str | None:
        """The upstream image for a chip, or None where the engine does not support the chip."""
        return next((r.image for r in self.releases if chip in r.chips), None)

    def default_version(self) -> Version:
        """The engine version of the default images (all chips carry the same one)."""
        return parse_version(self.releases[0].version)

    def image_version(self, image: str) -> Version:
        """The version an image carries: from a ``v<x.y.z>`` tag, else the default image's."""
        return tag_version(image) or self.default_version()

    def upstream_repositories(self) -> frozenset[str]:
        """Repositories of the default images: they do not contain this project's exporter."""
        return frozenset(repository(r.image) for r in self.releases)


@dataclass(frozen=True)
class Rank:
    """Where one pod sits in its replica's gang."""

    replica: int
    rank: int
    pods: int
    role: str | None = None  # prefill or decode in a two-role fleet; None in a colocated one
    engine_id: str | None = None  # the instance's KV-transfer identity (its leader's name), two-role only

    @property
    def leader(self) -> bool:
        """Rank 0 serves the HTTP API; the others hold pipeline stages."""
        return self.rank == 0


@dataclass(frozen=True)
class Flag:
    """One generated flag and the spec field it comes from (for conflict messages)."""

    name: str
    value: str | None
    source: str

    def tokens(self) -> list[str]:
        """The flag as argv tokens."""
        return [self.name] if self.value is None else [self.name, self.value]


class EngineRenderer(ABC):
    """One engine's renderer: the parts of an engine pod that differ between engines."""

    facts: EngineFacts

    @abstractmethod
    def flags(self, spec: EngineSpec, layout: EngineLayout, at: Rank) -> list[Flag]:
        """The flags the engine gets for this pod, before the user's own args."""

    @abstractmethod
    def command(self, spec: EngineSpec, layout: EngineLayout, at: Rank, exporter: bool) -> list[str]:
        """The container command (argv) for one pod; ``exporter`` says whether the exporter runs in it."""

    @abstractmethod
    def env(self, spec: EngineSpec, layout: EngineLayout) -> list[dict]:
        """The engine's own environment, after the variables every engine pod gets."""

    def kv_env(self, spec: EngineSpec, at: Rank, store_host: str) -> list[dict]:
        """The KV-transfer environment of a two-role fleet's pod (``store_host``: the first prefill leader)."""
        return []

    @abstractmethod
    def leader_ports(self, spec: EngineSpec) -> list[dict]:
        """Container ports the leader of a multi-pod replica opens for its workers."""

    @abstractmethod
    def version_problems(self, spec: EngineSpec, layout: EngineLayout, image: str) -> list[str]:
        """Settings the image's engine version cannot run, each with what would fit."""

    def version_warnings(self, spec: EngineSpec, image: str) -> list[str]:
        """Settings the image's engine starts with but does not act on, each with what to do instead."""
        return []

    def argv(self, spec: EngineSpec, layout: EngineLayout, at: Rank) -> list[str]:
        """Generated flags as tokens, then the user's args."""
        return [t for flag in self.flags(spec, layout, at) for t in flag.tokens()] + list(spec.engine.args)

    def arg_conflicts(self, spec: EngineSpec, layout: EngineLayout, role: str | None = None) -> list[str]:
        """User args that repeat a generated flag, in any spelling the engine accepts: reported, never overridden.

        The KV-transfer flags of a two-role fleet are generated flags too, so ``args`` cannot replace them.
        """
        generated: dict[str, Flag] = {}
        for rank in range(layout.pods_per_replica):  # workers may get flags the leader does not (--headless)
            at = Rank(0, rank, layout.pods_per_replica, role, "engine" if role else None)
            for flag in self.flags(spec, layout, at):
                generated.setdefault(flag.name, flag)
        reserved = {
            name: Flag(name, None, "the layout") for name in self.facts.layout_flags if name not in generated
        }
        compilation = self.facts.compilation
        compiling = {
            name: Flag(name, None, "spec.engine.compilation")
            for name in (compilation.flags if compilation and spec.engine.compilation else ())
            if name not in generated
        }
        problems = []
        for arg in spec.engine.args:
            if not arg.startswith("-"):
                continue
            source = self._generated_option(self._spelled(arg), generated)
            if source is not None:
                # A long value (a JSON config) is left out: the flag names the conflict, and both roles of a
                # two-role fleet then tell it in one sentence.
                short = source.value is not None and len(source.value) <= _SHOWN_VALUE_CHARS
                shown = f"{source.name} {source.value}" if short else source.name
                problems.append(
                    f"spec.engine.args: {arg!r} repeats the generated {shown!r} (from {source.source}); "
                    f"set it there instead of in args"
                )
            elif (planned := self._generated_option(self._spelled(arg), reserved)) is not None:
                problems.append(
                    f"spec.engine.args: {arg!r} ({planned.name}) changes the layout the operator plans: one "
                    f"engine of tensor x pipeline NPUs per replica, its ranks placed by the operator; set "
                    f"spec.parallelism (or spec.disaggregation) instead of {planned.name}"
                )
            elif (compiled := self._generated_option(self._spelled(arg), compiling)) is not None:
                problems.append(
                    f"spec.engine.args: {arg!r} ({compiled.name}) changes what spec.engine.compilation sets "
                    f"(graphs, capture sizes, fusion passes); set it there, or leave spec.engine.compilation "
                    f"out to pass {self.facts.label}'s own compilation options in args"
                )
        return problems

    def _spelled(self, arg: str) -> str:
        """The option an argument names, with the engine's underscore rule applied (``--a_b=1`` -> ``--a-b``).

        Where the parser reads dotted keys, ``--a-b.key=1`` names ``--a-b``; a joined short option's value is cut
        off (``-O3`` names ``-O``).
        """
        option = arg.split("=", 1)[0]
        if self.facts.dotted and "." in option:
            option = option.split(".", 1)[0]
        option = next(
            (
                short
                for short in self.facts.joined
                if option.startswith(short) and not option.startswith("--")
            ),
            option,
        )
        if self.facts.underscores and option.startswith("--"):
            option = "--" + option[2:].replace("_", "-")
        return option

    def _generated_option(self, option: str, generated: dict[str, Flag]) -> Flag | None:
        """The generated flag an option means: its own name, an alias, or an unambiguous prefix of a long name."""
        aliases = self.facts.aliases
        if option in generated:
            return generated[option]
        for name, spellings in aliases.items():
            if option in spellings and name in generated:
                return generated[name]
        if option.startswith("--") and len(option) > 3:
            candidates = [
                (s, f)
                for f in generated.values()
                for s in (f.name, *aliases.get(f.name, ()))
                if s.startswith("--")
            ]
            matches = {f.name: f for s, f in candidates if s.startswith(option)}
            if len(matches) == 1:
                return next(iter(matches.values()))
        return None


def shared_flags(spec: EngineSpec, spelling: Spelling) -> list[Flag]:
    """Precision, batching limits and context length, in one engine's spelling."""
    if spec.precision == "int8":
        flags = [Flag("--quantization", spelling.quantization, "spec.precision")]
    else:
        flags = [Flag("--dtype", DTYPE[spec.precision], "spec.precision")]
    optional = (
        (spelling.max_batch_size, spec.batching.max_batch_size, "spec.batching.maxBatchSize"),
        (spelling.max_batch_tokens, spec.batching.max_batch_tokens, "spec.batching.maxBatchTokens"),
        (spelling.max_model_len, spec.model.max_model_len, "spec.model.maxModelLen"),
    )
    flags += [Flag(name, str(value), source) for name, value, source in optional if value]
    return flags


def compilation_problems(facts: EngineFacts, spec: EngineSpec, image: str) -> list[str]:
    """spec.engine.compilation on an image whose engine predates the options it renders into."""
    compilation = facts.compilation
    if spec.engine.compilation is None or compilation is None:
        return []
    version = facts.image_version(image)
    if version >= compilation.since:
        return []
    return [
        f"spec.engine.compilation: image {image} carries {facts.label} {format_version(version)}, and the "
        f"options it renders into ({compilation.source}) were read in {facts.label} "
        f"{format_version(compilation.since)}, not in older releases; use an image with {facts.label} "
        f"{format_version(compilation.since)} or newer, or leave spec.engine.compilation out"
    ]


def fraction(value: float) -> str:
    """A memory fraction as the engines' parsers take it: ``0.9``, ``0.85``, ``1.0``."""
    return f"{value:.2f}".rstrip("0").rstrip(".") if value < 1 else "1.0"
