"""What one engine process publishes, and the union of all of them that the endpoint serves (pure).

Every engine process of a pod (one per tensor-parallel rank) writes one :class:`ProcessRecord` with
the devices it uses; whichever process holds the port merges the live records with :func:`merge`:

- allocator values of one device add up over processes (each process has its own allocator, and a
  device normally has exactly one), and the ratios are recomputed from the sums;
- npu-smi values describe the whole device, so they are never added: the newest sample wins;
- scrape-error counts add up per collector.

So a device appears once however many processes report it, and nothing is counted twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

from ascend_fleet_exporter.allocator import AllocatorStats, combine, combined_ratios
from ascend_fleet_exporter.metrics import DeviceSample
from ascend_fleet_exporter.npu_smi import NpuUsage

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEMA = 1


@dataclass(frozen=True)
class TimedUsage:
    """npu-smi usage of a device and when it was sampled (monotonic seconds)."""

    sampled_at: float
    usage: NpuUsage


@dataclass(frozen=True)
class ProcessRecord:
    """The samples of one engine process, keyed by device id (string, as in the ``device`` label)."""

    pid: int
    written_at: float
    interval: float
    allocator: Mapping[str, AllocatorStats] = field(default_factory=dict)
    usage: Mapping[str, TimedUsage] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)

    def stale(self, now: float) -> bool:
        """Whether the writer has missed several samples in a row: a hung or vanished process."""
        return now - self.written_at > stale_after(self.interval)


@dataclass(frozen=True)
class Snapshot:
    """The union of live records: one sample per device and error counts per collector."""

    devices: dict[str, DeviceSample]
    scrape_errors: dict[str, float]


def stale_after(interval: float) -> float:
    """Seconds without a rewrite after which a record is ignored: three missed samples, at least 10 s."""
    return max(3 * interval, 10.0)


def merge(records: Iterable[ProcessRecord]) -> Snapshot:
    """One :class:`~ascend_fleet_exporter.metrics.DeviceSample` per device over all records."""
    records = list(records)
    allocators: dict[str, list[AllocatorStats]] = {}
    usages: dict[str, TimedUsage] = {}
    errors: dict[str, float] = {}
    for record in records:
        for device, stats in record.allocator.items():
            allocators.setdefault(device, []).append(stats)
        for device, timed in record.usage.items():
            if device not in usages or timed.sampled_at > usages[device].sampled_at:
                usages[device] = timed
        for collector, count in record.errors.items():
            errors[collector] = errors.get(collector, 0.0) + count
    devices = {
        device: device_sample(allocators.get(device, []), usages.get(device))
        for device in {*allocators, *usages}
    }
    return Snapshot(devices=devices, scrape_errors=errors)


def device_sample(allocators: list[AllocatorStats], usage: TimedUsage | None) -> DeviceSample:
    """The exported values of one device from its processes' allocator values and its npu-smi usage."""
    total = combine(allocators) if allocators else AllocatorStats()
    fragmentation, slack = combined_ratios(allocators)
    npu = usage.usage if usage else NpuUsage()
    return DeviceSample(
        utilization_ratio=npu.aicore_ratio,
        aicube_ratio=npu.aicube_ratio,
        aivector_ratio=npu.aivector_ratio,
        aicpu_ratio=npu.aicpu_ratio,
        hbm_used_bytes=npu.hbm_used_bytes,
        hbm_total_bytes=npu.hbm_total_bytes,
        hbm_bandwidth_ratio=npu.hbm_bandwidth_ratio,
        fragmentation_ratio=fragmentation,
        slack_ratio=slack,
        reserved_bytes=total.reserved_bytes,
        allocated_bytes=total.allocated_bytes,
        alloc_retries=total.alloc_retries,
        ooms=total.ooms,
        largest_free_block_bytes=total.largest_free_block_bytes,
    )


def encode(record: ProcessRecord) -> str:
    """The record as JSON text (the spool file format)."""
    devices: dict[str, dict[str, Any]] = {}
    for device, stats in record.allocator.items():
        devices.setdefault(device, {})["allocator"] = _fields(stats)
    for device, timed in record.usage.items():
        devices.setdefault(device, {})["usage"] = {"sampled_at": timed.sampled_at, **_fields(timed.usage)}
    return json.dumps(
        {
            "schema": SCHEMA,
            "pid": record.pid,
            "written_at": record.written_at,
            "interval": record.interval,
            "devices": devices,
            "errors": dict(record.errors),
        },
        sort_keys=True,
    )


def decode(text: str) -> ProcessRecord:
    """A record from its JSON text; :class:`ValueError` says what is wrong with a malformed one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from error
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a schema-{SCHEMA} record")
    pid = data.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"pid {pid!r} is not a process id")
    devices = data.get("devices")
    errors = data.get("errors")
    if not isinstance(devices, dict) or not isinstance(errors, dict):
        raise ValueError("devices and errors must be objects")
    allocator: dict[str, AllocatorStats] = {}
    usage: dict[str, TimedUsage] = {}
    for device, entry in devices.items():
        if not isinstance(entry, dict):
            raise ValueError(f"device {device!r} is not an object")
        if entry.get("allocator") is not None:
            allocator[str(device)] = AllocatorStats(**_numbers(entry["allocator"], AllocatorStats))
        if entry.get("usage") is not None:
            values = _numbers(entry["usage"], NpuUsage, extra=("sampled_at",))
            sampled_at = values.pop("sampled_at")
            if sampled_at is None:
                raise ValueError(f"device {device!r} usage has no sampled_at")
            usage[str(device)] = TimedUsage(sampled_at, NpuUsage(**values))
    return ProcessRecord(
        pid=pid,
        written_at=_number(data.get("written_at"), "written_at", required=True),
        interval=_number(data.get("interval"), "interval", required=True),
        allocator=allocator,
        usage=usage,
        errors={str(k): int(_number(v, f"errors[{k!r}]", required=True)) for k, v in errors.items()},
    )


def _fields(value: object) -> dict[str, Any]:
    return dict(vars(value))


def _numbers(
    data: object, kind: type[DataclassInstance], extra: tuple[str, ...] = ()
) -> dict[str, float | None]:
    if not isinstance(data, dict):
        raise ValueError(f"{kind.__name__} entry is not an object")
    names = [*kind.__dataclass_fields__, *extra]
    return {name: _number(data.get(name), name) for name in names}


@overload
def _number(value: object, name: str, required: Literal[True]) -> float: ...


@overload
def _number(value: object, name: str, required: bool = False) -> float | None: ...


def _number(value: object, name: str, required: bool = False) -> float | None:
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} is {value!r}, expected a finite number")
    return float(value)
