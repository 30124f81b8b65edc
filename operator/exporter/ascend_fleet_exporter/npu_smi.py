"""Reading ``npu-smi`` output: usage per chip and the chip behind each logical device (pure).

``npu-smi info -t usages -i <npu id>`` prints ``key : value`` lines per chip of a card, each chip's
block closed by its ``Chip ID`` line::

    NPU ID                         : 0
    Chip Count                     : 1

    HBM Capacity(MB)               : 65536
    HBM Usage Rate(%)              : 3
    Aicore Usage Rate(%)           : 37
    Aivector Usage Rate(%)         : 21
    Aicpu Usage Rate(%)            : 0
    HBM Bandwidth Usage Rate(%)    : 48
    ...
    Aicube Usage Rate(%)           : 30
    Chip ID                        : 0

Which lines appear depends on the chip and the driver (docs/exporter.md has the table): the AI Vector and
AI Cube lines exist on Atlas A2 and A3 (a 310P prints ``Vectorcore`` instead), the AI Cube line only with
newer drivers, and a line whose value is hidden (a virtual NPU) is left out. Those optional lines are read when present and are simply
unknown when absent.

``npu-smi info -m`` maps cards and chips to logical ids (``NPU ID  Chip ID  Chip Logic ID  Chip Name``);
rows without a logic id (``-``, the card's MCU) are not devices. The runtime numbers the devices a
container sees 0..n-1 in logic-id order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# npu-smi prints HBM sizes in "MB" that are mebibytes: 1 MB = 1024 * 1024 bytes.
MIB = 1024 * 1024

# Keys compared without spaces and case: versions differ in spacing ("Aicore" vs "AI Core").
_AICORE_RATE = ("aicoreusagerate(%)",)
_HBM_RATE = ("hbmusagerate(%)",)
_HBM_CAPACITY = ("hbmcapacity(mb)",)
_USAGE_KEYS = frozenset(_AICORE_RATE + _HBM_RATE + _HBM_CAPACITY)
# Lines a chip generation may lack (see the module docstring): absent means unknown, not a problem.
# Field -> (the line as npu-smi spells it, for messages; its normalized keys). Atlas 300I Duo (310P) calls
# its vector cores "Vectorcore"; npu-exporter reads both as vector utilization.
_OPTIONAL_RATES = {
    "aicube_ratio": ("Aicube Usage Rate(%)", ("aicubeusagerate(%)",)),
    "aivector_ratio": ("Aivector Usage Rate(%)", ("aivectorusagerate(%)", "vectorcoreusagerate(%)")),
    "aicpu_ratio": ("Aicpu Usage Rate(%)", ("aicpuusagerate(%)",)),
    "hbm_bandwidth_ratio": ("HBM Bandwidth Usage Rate(%)", ("hbmbandwidthusagerate(%)",)),
}
# What a chip that does not report a value may print instead of leaving the line out.
_NOT_REPORTED = frozenset({"na", "n/a", "-"})
_CHIP_ID = "chipid"

_MAP_COLUMNS = ("NPU ID", "Slot ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name")


@dataclass(frozen=True)
class NpuUsage:
    """Device-level usage of one chip; ``None`` = not reported."""

    aicore_ratio: float | None = None
    hbm_used_bytes: float | None = None
    hbm_total_bytes: float | None = None
    aicube_ratio: float | None = None
    aivector_ratio: float | None = None
    aicpu_ratio: float | None = None
    hbm_bandwidth_ratio: float | None = None


@dataclass(frozen=True)
class ChipRow:
    """One row of ``npu-smi info -m``: a chip, by card (NPU ID) and chip index, and its logic id."""

    npu_id: int
    chip_id: int
    logic_id: int | None
    name: str


def parse_usages(text: str) -> tuple[dict[int | None, NpuUsage], tuple[str, ...]]:
    """Usage per chip id from ``npu-smi info -t usages`` output, and a line per problem.

    Output without any ``Chip ID`` line (one chip, or an older npu-smi) is one block, keyed ``None``.
    Missing lines and values such as ``NA`` give ``None`` fields and a problem line; nothing raises. The
    optional lines (AI Cube, AI Vector, AI CPU, HBM bandwidth) give ``None`` without a problem when a chip
    leaves them out or prints ``NA``; a value that is there but not a percentage is still a problem.
    """
    pairs = _key_values(text)
    if not any(key in _USAGE_KEYS for key, _ in pairs):
        return {}, ("npu-smi usages output has no AICore or HBM lines",)
    usages: dict[int | None, NpuUsage] = {}
    problems: list[str] = []
    for chip, block in _chip_blocks(pairs):
        usage, block_problems = _usage(block)
        usages[chip] = usage
        where = "" if chip is None else f"chip {chip}: "
        problems += [where + problem for problem in block_problems]
    return usages, tuple(problems)


def usage_of_chip(usages: dict[int | None, NpuUsage], chip_id: int) -> NpuUsage | None:
    """The usage of ``chip_id``; a single block without chip id stands for chip 0 of its card."""
    if chip_id in usages:
        return usages[chip_id]
    if chip_id == 0 and list(usages) == [None]:
        return usages[None]
    return None


def parse_chip_map(text: str) -> tuple[list[ChipRow], tuple[str, ...]]:
    """The chips listed by ``npu-smi info -m``, and a line per row that could not be read."""
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if "NPU ID" in line and "Chip ID" in line), None)
    if header_at is None:
        return [], ("npu-smi info -m output has no 'NPU ID ... Chip ID' header",)
    columns = _header_columns(lines[header_at])
    chips: list[ChipRow] = []
    problems: list[str] = []
    for line in lines[header_at + 1 :]:
        if not line.strip():
            continue
        row = dict(zip(columns, line.split(None, len(columns) - 1), strict=False))
        chip = _chip(row)
        if chip is None:
            problems.append(f"npu-smi info -m row not understood: {line.strip()!r}")
        elif chip.logic_id is not None or "Chip Logic ID" not in columns:
            chips.append(chip)
    if "Chip Logic ID" not in columns:
        chips = [chip for chip in chips if chip.name.lower() != "mcu"]
    return chips, tuple(problems)


def logical_devices(chips: list[ChipRow]) -> dict[int, ChipRow]:
    """The chip behind each device id of the container.

    The runtime numbers the chips a container sees 0..n-1 in logic-id order (card and chip order
    when npu-smi prints no logic id).
    """
    ordered = sorted(chips, key=lambda c: (c.logic_id is None, c.logic_id or 0, c.npu_id, c.chip_id))
    return dict(enumerate(ordered))


def _key_values(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        normalized = re.sub(r"\s+", "", key).lower()
        if colon and normalized:
            pairs.append((normalized, value.strip()))
    return pairs


def _chip_blocks(pairs: list[tuple[str, str]]) -> list[tuple[int | None, list[tuple[str, str]]]]:
    """Split key/value pairs into per-chip blocks.

    npu-smi closes each block with its ``Chip ID`` line; should a version open blocks with it instead
    (no usage line before the first ``Chip ID``), the blocks follow it.
    """
    chip_lines = [i for i, (key, _) in enumerate(pairs) if key == _CHIP_ID]
    if not chip_lines:
        return [(None, pairs)]
    closing = any(key in _USAGE_KEYS for key, _ in pairs[: chip_lines[0]])
    bounds = [-1, *chip_lines] if closing else [*chip_lines, len(pairs)]
    blocks = []
    for index, chip_line in enumerate(chip_lines):
        start, end = (bounds[index] + 1, chip_line) if closing else (chip_line + 1, bounds[index + 1])
        chip = pairs[chip_line][1]
        blocks.append((int(chip) if chip.isdigit() else None, pairs[start:end]))
    return blocks


def _usage(block: list[tuple[str, str]]) -> tuple[NpuUsage, list[str]]:
    values = dict(block)
    problems: list[str] = []

    def number(
        keys: tuple[str, ...], label: str, upper: float | None, optional: bool = False
    ) -> float | None:
        text = next((values[k] for k in keys if k in values), None)
        if text is None or (optional and text.strip().lower() in _NOT_REPORTED):
            if not optional:
                problems.append(f"no {label!r} line")
            return None
        try:
            value = float(text.rstrip("%").strip())
        except ValueError:
            problems.append(f"{label} is {text!r}, expected a number")
            return None
        if not math.isfinite(value) or value < 0 or (upper is not None and value > upper):
            problems.append(f"{label} is {text!r}, out of range")
            return None
        return value

    aicore = number(_AICORE_RATE, "Aicore Usage Rate(%)", 100)
    capacity_mb = number(_HBM_CAPACITY, "HBM Capacity(MB)", None)
    hbm_rate = number(_HBM_RATE, "HBM Usage Rate(%)", 100)
    total = None if capacity_mb is None else capacity_mb * MIB
    used = None if total is None or hbm_rate is None else total * hbm_rate / 100
    optional = {
        field: _ratio(number(keys, label, 100, optional=True))
        for field, (label, keys) in _OPTIONAL_RATES.items()
    }
    return NpuUsage(
        aicore_ratio=_ratio(aicore), hbm_used_bytes=used, hbm_total_bytes=total, **optional
    ), problems


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100


def _header_columns(header: str) -> list[str]:
    """Column names of the ``-m`` table: runs of 2+ spaces separate them; known names otherwise."""
    columns = [c for c in re.split(r"\s{2,}", header.strip()) if c]
    if len(columns) >= 3:
        return columns
    found = sorted((header.find(name), name) for name in _MAP_COLUMNS if name in header)
    return [name for _, name in found]


def _chip(row: dict[str, str]) -> ChipRow | None:
    npu, chip, logic = row.get("NPU ID", ""), row.get("Chip ID", ""), row.get("Chip Logic ID", "-")
    if not npu.isdigit() or not chip.isdigit():
        return None
    if not logic.isdigit() and logic != "-":
        return None
    return ChipRow(
        int(npu), int(chip), int(logic) if logic.isdigit() else None, row.get("Chip Name", "").strip()
    )
