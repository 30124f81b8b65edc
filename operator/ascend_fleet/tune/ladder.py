"""Which rungs a tuning run measures (pure).

A rung is a batch size (the engine's ``maxBatchSize`` and the benchmark client's concurrency) plus, when
``--try-adaptive`` asks for them, the engine's own adaptive knobs. On Ascend chips batch sizes are rounded
to multiples of 16: the AI Core's cube unit computes on 16-row tiles, so a batch of 4 or 8 pads to 16 and
costs the same step time (the seeds keep batch sizes multiples of 16 for this reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engines import UnknownEngine, facts_of
from ..engines.base import PREFILL_DELAYER

DEFAULT_LADDER = (4, 8, 16, 32, 64, 128)
# Every chip the API knows is an Ascend chip with 16-row cube tiles.
BATCH_MULTIPLE: dict[str, int] = {"ascend910a": 16, "ascend910b": 16, "ascend910_93": 16}


@dataclass(frozen=True)
class Variant:
    """Engine-native adaptive knobs a rung runs with: a label and the ``spec.batching`` fields they set."""

    label: str = ""
    batching: tuple[tuple[str, Any], ...] = ()

    def fields(self) -> dict[str, Any]:
        """The ``spec.batching`` fields (camelCase) this variant sets."""
        return dict(self.batching)


PLAIN = Variant()
PREFILL_DELAYER_VARIANT = Variant("prefillDelayer", (("prefillDelayer", {"enabled": True}),))
NO_CHUNKED_PREFILL = Variant("chunkedPrefill=false", (("chunkedPrefill", False),))
# Every batching field a variant may set, so a plain rung clears what an adaptive one set before it.
VARIANT_FIELDS = ("prefillDelayer", "chunkedPrefill")


def adaptive_variants(engine: str | None) -> tuple[Variant, ...]:
    """The adaptive knobs an engine type has: the prefill delayer where its facts list it; chunked prefill off for all."""
    try:
        features = facts_of(engine or "").features
    except UnknownEngine:
        return ()
    delayer = (PREFILL_DELAYER_VARIANT,) if PREFILL_DELAYER in features else ()
    return (*delayer, NO_CHUNKED_PREFILL)


@dataclass(frozen=True)
class Rung:
    """One point of the ladder."""

    batch_size: int
    variant: Variant = field(default=PLAIN)

    @property
    def label(self) -> str:
        return f"{self.batch_size}" + (f" +{self.variant.label}" if self.variant.label else "")


def parse_ladder(text: str) -> tuple[int, ...]:
    """Batch sizes from ``4,8,16`` (any order, duplicates dropped); a readable error otherwise."""
    sizes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"--ladder: {item!r} is not a positive batch size; write e.g. 4,8,16,32,64,128")
        sizes.append(int(item))
    if not sizes:
        raise ValueError("--ladder is empty; write batch sizes separated by commas, e.g. 4,8,16,32,64,128")
    return tuple(sorted(set(sizes)))


def round_to_multiple(size: int, multiple: int) -> int:
    """The nearest multiple (halves round up), never below one multiple."""
    if multiple <= 1:
        return size
    return max(multiple, (size + multiple // 2) // multiple * multiple)


def rounded_ladder(sizes: tuple[int, ...], chip: str | None) -> tuple[tuple[int, ...], list[str]]:
    """The ladder the chip runs, and one note per size that rounding changed."""
    multiple = BATCH_MULTIPLE.get(chip or "", 1)
    out: list[int] = []
    notes = []
    for size in sizes:
        rounded = round_to_multiple(size, multiple)
        if rounded != size:
            notes.append(f"batch {size} -> {rounded} ({chip} batches in multiples of {multiple})")
        if rounded not in out:
            out.append(rounded)
    return tuple(sorted(out)), notes


def rungs(sizes: tuple[int, ...], engine: str | None, try_adaptive: bool) -> list[Rung]:
    """The plain rungs, then (when asked) every size again with each adaptive knob the engine has."""
    plain = [Rung(size) for size in sizes]
    if not try_adaptive:
        return plain
    variants = adaptive_variants(engine)
    return plain + [Rung(size, variant) for variant in variants for size in sizes]
