"""The two collectors: torch_npu's allocator inside the engine process, and ``npu-smi`` for the device.

Each returns a reading (values, problem lines, a count of failed device samples) and never raises,
except :class:`CollectorUnavailable` when it cannot run in this process at all (torch_npu not
installed, no ``npu-smi`` binary): the exporter then says so once and carries on without it.
"""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Generic, Protocol, TypeVar

from ascend_fleet_exporter.allocator import (
    AllocatorStats,
    holds_memory,
    largest_free_blocks,
    parse_memory_stats,
)
from ascend_fleet_exporter.npu_smi import (
    ChipRow,
    NpuUsage,
    logical_devices,
    parse_chip_map,
    parse_usages,
    usage_of_chip,
)

V = TypeVar("V")


class CollectorUnavailable(Exception):
    """A collector cannot work in this process; the message says why and what would fix it."""


class NpuSmiFailed(Exception):
    """One ``npu-smi`` call failed; the next round tries again."""


class StatsProvider(Protocol):
    """Where allocator statistics come from: torch_npu in an engine, a stand-in in tests."""

    def device_count(self) -> int:
        """Devices visible to this process."""

    def memory_stats(self, device: int) -> Mapping[str, Any]:
        """``torch_npu.npu.memory_stats(device)`` of this process."""


@dataclass
class Reading(Generic[V]):
    """One round of a collector: values per device id, what went wrong, how many devices failed."""

    values: dict[int, V] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    failed: int = 0


class TorchNpuStats:
    """The allocator statistics of this process, from torch_npu, imported on first use.

    Only reads statistics: it never initializes the NPU runtime or selects a device, because the
    engine owns those and a context created from this thread would take device memory.
    """

    def __init__(self, module: ModuleType | None = None) -> None:
        self._module = module

    def device_count(self) -> int:
        return int(self._npu().device_count())

    def memory_stats(self, device: int) -> Mapping[str, Any]:
        npu = self._npu()
        # Before the engine initializes the runtime there are no statistics, and asking for a
        # device index then would fail inside torch_npu ("did you call init?").
        if not npu.is_initialized():
            return {}
        return npu.memory_stats(device)

    def memory_snapshot(self) -> object:
        """``torch_npu.npu.memory_snapshot()``: this process's segments and blocks ([] before the runtime)."""
        npu = self._npu()
        if not npu.is_initialized():
            return []
        return npu.memory_snapshot()

    def _npu(self) -> Any:
        if self._module is None:
            try:
                self._module = importlib.import_module("torch_npu")
            except ImportError as error:
                raise CollectorUnavailable(
                    f"torch_npu cannot be imported in this Python environment ({error}); memory "
                    "fragmentation, slack, reserved, allocated, allocation retries and OOMs are not "
                    "exported. Run the exporter inside the engine process of an image with torch_npu."
                ) from error
        return self._module.npu


def read_allocator(provider: StatsProvider, owned: set[int]) -> Reading[AllocatorStats]:
    """Allocator values of the devices this process uses.

    A device counts as used once its allocator has held memory; ``owned`` remembers that across
    rounds, so a device whose cache was emptied keeps reporting (zeros) instead of vanishing.
    """
    reading: Reading[AllocatorStats] = Reading()
    try:
        count = provider.device_count()
    except CollectorUnavailable:
        raise
    except Exception as error:  # whatever torch_npu raises, the engine must not notice
        reading.problems.append(f"torch_npu device_count failed: {error!r}")
        reading.failed += 1
        return reading
    for device in range(count):
        try:
            raw = provider.memory_stats(device)
        except CollectorUnavailable:
            raise
        except Exception as error:
            if device in owned:
                reading.problems.append(f"device {device}: torch_npu memory_stats failed: {error!r}")
                reading.failed += 1
            continue
        if device not in owned and not holds_memory(raw):
            continue
        owned.add(device)
        stats, problems = parse_memory_stats(raw)
        reading.values[device] = stats
        reading.problems += [f"device {device}: {problem}" for problem in problems]
        reading.failed += bool(problems)
    _add_largest_free_blocks(provider, reading)
    return reading


def _add_largest_free_blocks(provider: StatsProvider, reading: Reading[AllocatorStats]) -> None:
    """The largest free block of each device read, where the provider lists segments (torch_npu does)."""
    snapshot = getattr(provider, "memory_snapshot", None)
    if snapshot is None or not reading.values:
        return
    try:
        largest, problems = largest_free_blocks(snapshot())
    except CollectorUnavailable:
        raise
    except Exception as error:
        largest, problems = {}, (f"torch_npu memory_snapshot failed: {error!r}",)
    if problems:  # unknown, not 0: the series is left out
        reading.problems += list(problems)
        reading.failed += 1
        return
    for device, stats in reading.values.items():
        reading.values[device] = dataclasses.replace(stats, largest_free_block_bytes=largest.get(device, 0.0))


class NpuSmi:
    """Device utilization and HBM from the ``npu-smi`` command line tool."""

    def __init__(self, binary: str = "npu-smi", timeout: float = 10.0) -> None:
        self._binary = binary
        self._timeout = timeout
        self._devices: dict[int, ChipRow] | None = None

    def read(self, devices: Iterable[int] | None = None) -> Reading[NpuUsage]:
        """Usage of the given device ids of the container (all its devices when ``None``)."""
        reading: Reading[NpuUsage] = Reading()
        chips = self._device_map(reading)
        if chips is None:
            return reading
        wanted = sorted(chips if devices is None else devices)
        cards: dict[int, list[int]] = {}
        for device in wanted:
            if device in chips:
                cards.setdefault(chips[device].npu_id, []).append(device)
            else:
                reading.problems.append(f"device {device}: npu-smi lists no chip for it")
                reading.failed += 1
        for npu_id, card_devices in sorted(cards.items()):
            self._read_card(npu_id, card_devices, chips, reading)
        return reading

    def _read_card(
        self, npu_id: int, devices: list[int], chips: dict[int, ChipRow], reading: Reading[NpuUsage]
    ) -> None:
        # One call per card covers all its chips (two on A3 cards), with or without `-c` support.
        try:
            text = self._run("info", "-t", "usages", "-i", str(npu_id))
        except NpuSmiFailed as error:
            reading.problems.append(str(error))
            reading.failed += len(devices)
            return
        usages, problems = parse_usages(text)
        for device in devices:
            usage = usage_of_chip(usages, chips[device].chip_id)
            if usage is None:
                reading.problems.append(
                    f"device {device}: npu-smi usages of NPU {npu_id} show no chip {chips[device].chip_id}"
                )
                reading.failed += 1
                continue
            reading.values[device] = usage
        if problems:
            reading.problems += [f"npu-smi usages of NPU {npu_id}: {problem}" for problem in problems]
            reading.failed += len(devices)

    def _device_map(self, reading: Reading[NpuUsage]) -> dict[int, ChipRow] | None:
        """Device id -> chip, read once; retried on every round until it succeeds."""
        if self._devices is not None:
            return self._devices
        try:
            chips, problems = parse_chip_map(self._run("info", "-m"))
        except NpuSmiFailed as error:
            reading.problems.append(str(error))
            reading.failed += 1
            return None
        devices = logical_devices(chips)
        reading.problems += problems
        if not devices:
            reading.problems.append("npu-smi info -m lists no NPU chip")
            reading.failed += 1
            return None
        self._devices = devices
        return devices

    def _run(self, *args: str) -> str:
        command = [self._binary, *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self._timeout, check=False)
        except FileNotFoundError as error:
            raise CollectorUnavailable(
                f"{self._binary} is not installed or not on PATH; NPU utilization and HBM are not exported. "
                "Use the Ascend Docker Runtime or mount /usr/local/bin/npu-smi, /usr/local/dcmi and the driver."
            ) from error
        except (OSError, subprocess.SubprocessError) as error:
            raise NpuSmiFailed(f"{' '.join(command)} failed: {error}") from error
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise NpuSmiFailed(f"{' '.join(command)} exited with {done.returncode}: {detail[0]}")
        return done.stdout
