"""torch_npu caching-allocator statistics reduced to the exporter's values (pure).

``torch_npu.npu.memory_stats(device)`` returns the ``torch.cuda.memory_stats`` schema: a flat dict
such as ``{"reserved_bytes.all.current": ..., "num_alloc_retries": ...}``. From it:

- fragmentation = ``inactive_split_bytes / reserved_bytes``: reserved memory that sits in split,
  unused blocks and cannot be handed back (near 0 with ``expandable_segments:True``);
- slack = ``1 - allocated_bytes / reserved_bytes``: reserved memory not holding tensors.

``torch_npu.npu.memory_snapshot()`` lists the allocator's segments with their blocks (``torch.cuda``'s
schema: ``{"device", "blocks": [{"size", "state"}, ...]}``, a free block's state ``inactive``); from it:

- largest free block = the largest ``inactive`` block of the device's segments: the largest tensor the
  allocator can place without asking the device for more memory (0 when no block is free).

Nothing here imports torch: the functions take the dict, so they are tested on recorded ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real

RESERVED_KEY = "reserved_bytes.all.current"
ALLOCATED_KEY = "allocated_bytes.all.current"
INACTIVE_SPLIT_KEY = "inactive_split_bytes.all.current"
ALLOC_RETRIES_KEY = "num_alloc_retries"
OOMS_KEY = "num_ooms"

# Any of these above zero means this process has used the device's allocator: it owns the device.
_ACTIVITY_KEYS = (RESERVED_KEY, "reserved_bytes.all.peak", "allocation.all.allocated")

_MISSING = object()


@dataclass(frozen=True)
class AllocatorStats:
    """The allocator values the exporter publishes for one device of one process; ``None`` = unknown."""

    reserved_bytes: float | None = None
    allocated_bytes: float | None = None
    inactive_split_bytes: float | None = None
    alloc_retries: float | None = None
    ooms: float | None = None
    largest_free_block_bytes: float | None = None

    @property
    def fragmentation_ratio(self) -> float | None:
        """``inactive_split_bytes / reserved_bytes`` in 0..1, see :func:`fragmentation_ratio`."""
        return fragmentation_ratio(self.inactive_split_bytes, self.reserved_bytes)

    @property
    def slack_ratio(self) -> float | None:
        """``1 - allocated_bytes / reserved_bytes`` in 0..1, see :func:`slack_ratio`."""
        return slack_ratio(self.allocated_bytes, self.reserved_bytes)


def fragmentation_ratio(inactive_split_bytes: float | None, reserved_bytes: float | None) -> float | None:
    """Share of reserved memory in inactive split blocks, 0..1.

    0 when nothing is reserved (nothing can be fragmented), ``None`` when either input is unknown.
    """
    if inactive_split_bytes is None or reserved_bytes is None:
        return None
    if reserved_bytes <= 0:
        return 0.0
    return _clamp(inactive_split_bytes / reserved_bytes)


def slack_ratio(allocated_bytes: float | None, reserved_bytes: float | None) -> float | None:
    """Share of reserved memory not allocated to tensors, 0..1.

    0 when nothing is reserved (there is no slack to reclaim), ``None`` when either input is unknown.
    """
    if allocated_bytes is None or reserved_bytes is None:
        return None
    if reserved_bytes <= 0:
        return 0.0
    return _clamp(1.0 - allocated_bytes / reserved_bytes)


def parse_memory_stats(stats: object) -> tuple[AllocatorStats, tuple[str, ...]]:
    """The values of one ``memory_stats()`` result, and a readable line for each problem found.

    Missing keys and odd values (strings, booleans, negative or non-finite numbers) become ``None``
    with a problem line; nothing raises. The nested form (``memory_stats_as_nested_dict``) is read too.
    """
    if not isinstance(stats, Mapping):
        return AllocatorStats(), (f"memory_stats returned {type(stats).__name__}, expected a dict",)
    if not stats:
        return AllocatorStats(), ("memory_stats is empty: the allocator is not initialized in this process",)
    problems: list[str] = []

    def read(key: str) -> float | None:
        value, problem = _count(stats, key)
        if problem:
            problems.append(problem)
        return value

    parsed = AllocatorStats(
        reserved_bytes=read(RESERVED_KEY),
        allocated_bytes=read(ALLOCATED_KEY),
        inactive_split_bytes=read(INACTIVE_SPLIT_KEY),
        alloc_retries=read(ALLOC_RETRIES_KEY),
        ooms=read(OOMS_KEY),
    )
    problems += _inconsistencies(parsed)
    return parsed, tuple(problems)


FREE_BLOCK_STATE = "inactive"


def largest_free_blocks(segments: object) -> tuple[dict[int, float], tuple[str, ...]]:
    """Per device, the largest free (``inactive``) block of a ``memory_snapshot()`` result; nothing raises.

    A device with segments but no free block gets 0; a malformed result gives no values and a problem line.
    """
    if not isinstance(segments, list):
        return {}, (f"memory_snapshot returned {type(segments).__name__}, expected a list of segments",)
    largest: dict[int, float] = {}
    for segment in segments:
        device = segment.get("device") if isinstance(segment, Mapping) else None
        blocks = segment.get("blocks") if isinstance(segment, Mapping) else None
        if isinstance(device, bool) or not isinstance(device, int) or not isinstance(blocks, list):
            return {}, ("memory_snapshot has a segment without an integer device and a list of blocks",)
        free = [
            float(block["size"])
            for block in blocks
            if isinstance(block, Mapping)
            and block.get("state") == FREE_BLOCK_STATE
            and isinstance(block.get("size"), int)
            and not isinstance(block.get("size"), bool)
        ]
        largest[device] = max([largest.get(device, 0.0), *free])
    return largest, ()


def holds_memory(stats: object) -> bool:
    """Whether a ``memory_stats()`` result shows that this process has used the device."""
    if not isinstance(stats, Mapping):
        return False
    for key in _ACTIVITY_KEYS:
        value, _ = _count(stats, key)
        if value:
            return True
    return False


def combine(stats: list[AllocatorStats]) -> AllocatorStats:
    """Several processes' values for one device as one: bytes and counters add up.

    The largest free block is the largest of any process's: each process has its own pool, and a block
    cannot span two. Ratios of the result are ratios of the sums, which is what the device as a whole shows. A field
    unknown in every input stays unknown; a ratio uses only the processes that know both its terms.
    """

    def total(field: str) -> float | None:
        known = [getattr(s, field) for s in stats if getattr(s, field) is not None]
        return sum(known) if known else None

    return AllocatorStats(
        reserved_bytes=total("reserved_bytes"),
        allocated_bytes=total("allocated_bytes"),
        inactive_split_bytes=total("inactive_split_bytes"),
        alloc_retries=total("alloc_retries"),
        ooms=total("ooms"),
        largest_free_block_bytes=max(
            (s.largest_free_block_bytes for s in stats if s.largest_free_block_bytes is not None),
            default=None,
        ),
    )


def combined_ratios(stats: list[AllocatorStats]) -> tuple[float | None, float | None]:
    """Fragmentation and slack of several processes on one device, from the sums of paired terms."""
    paired_frag = [
        (s.inactive_split_bytes, s.reserved_bytes)
        for s in stats
        if s.inactive_split_bytes is not None and s.reserved_bytes is not None
    ]
    paired_slack = [
        (s.allocated_bytes, s.reserved_bytes)
        for s in stats
        if s.allocated_bytes is not None and s.reserved_bytes is not None
    ]
    fragmentation = (
        fragmentation_ratio(sum(i for i, _ in paired_frag), sum(r for _, r in paired_frag))
        if paired_frag
        else None
    )
    slack = (
        slack_ratio(sum(a for a, _ in paired_slack), sum(r for _, r in paired_slack))
        if paired_slack
        else None
    )
    return fragmentation, slack


def _count(stats: Mapping, key: str) -> tuple[float | None, str | None]:
    """A non-negative finite number under ``key`` (flat or nested), or ``None`` and why not."""
    value = _lookup(stats, key)
    if value is _MISSING:
        return None, f"memory_stats has no {key!r}"
    # bool is an int subclass; True bytes would be a bug upstream, not a value.
    if isinstance(value, bool) or not isinstance(value, Real):
        return None, f"memory_stats[{key!r}] is {value!r} ({type(value).__name__}), expected a number"
    number = float(value)
    if not math.isfinite(number) or number < 0:
        return None, f"memory_stats[{key!r}] is {value!r}, expected a non-negative finite number"
    return number, None


def _lookup(stats: Mapping, key: str) -> object:
    if key in stats:
        return stats[key]
    node: object = stats
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _inconsistencies(stats: AllocatorStats) -> list[str]:
    """Values that cannot all be true at once; the ratios are clamped, but say so."""
    problems = []
    reserved = stats.reserved_bytes
    if reserved is not None:
        for name, part in (
            ("inactive_split_bytes", stats.inactive_split_bytes),
            ("allocated_bytes", stats.allocated_bytes),
        ):
            if part is not None and part > reserved:
                problems.append(
                    f"memory_stats {name} ({part:.0f}) exceeds reserved_bytes ({reserved:.0f}); "
                    "the ratio is clamped to 0..1"
                )
    return problems


def _clamp(ratio: float) -> float:
    return min(1.0, max(0.0, ratio))
