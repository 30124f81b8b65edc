"""NPU health as a rule signal: ``npu_unhealthy``, read from the Ascend device plugin (pure).

The device plugin on every Ascend node grades each NPU's faults and publishes the result in one ConfigMap per
node (``mindx-dl-deviceinfo-<node>`` in ``kube-system``, see :mod:`ascend_fleet.api.names`): lists of the
NPUs it calls unhealthy or network-unhealthy, the faults behind them (level, codes, when each began), and the
NPUs an administrator separated by hand. The plugin's grading is the authority here: an NPU counts once the
plugin lists it as unhealthy, whatever its fault level; a fault it tolerates (``NotHandleFault``,
``SubHealthFault``, a ``PreSeparateNPU`` chip still in use) does not count.

A replica's value is the number of unhealthy NPUs its pods hold. A pod's NPUs are the ones the device plugin
(``huawei.com/AscendReal``) or the Volcano plugin (``huawei.com/Ascend910``) wrote on it; a pod without either
is taken to hold every NPU of its node, so a fault anywhere on that node counts (the safe side: a replica may
be replaced that a sharper view would have left alone, never the other way round).

The signal is answered as the Prometheus queries of the other metrics are, window and all: a rule's
``for`` is read from when each fault began, which the plugin records per fault code. For a fault without a
time, the operator's first sight of it is the start, held in memory (:class:`FaultClock`): an operator
restart then starts such a window again, which delays an action and never hastens one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..api import names
from ..api.catalog import signal_role
from .model import FleetState, Placement
from .queries import Observations, Query, expected_samples

# The device plugin's fault levels, most serious first (the order in which it picks a chip's level).
LEVELS = (
    "ManuallySeparateNPU",
    "SeparateNPU",
    "PreSeparateNPU",
    "RestartNPU",
    "FreeRestartNPU",
    "RestartBusiness",
    "RestartRequest",
    "SubHealthFault",
    "NotHandleFault",
)
UNGRADED = "Unhealthy"  # the level of an NPU listed unhealthy with no fault entry of its own


@dataclass(frozen=True)
class NpuFault:
    """One NPU the device plugin reports unhealthy."""

    node: str
    npu: str  # the plugin's name, Ascend910-<physical id>
    level: str
    codes: tuple[str, ...] = ()
    since: float | None = (
        None  # when its earliest fault began (epoch seconds); None: the plugin gives no time
    )

    def describe(self) -> str:
        codes = f", fault {','.join(self.codes)}" if self.codes else ""
        return f"{self.npu} on {self.node} ({self.level}{codes})"


def _names(value: object) -> set[str]:
    return {part.strip() for part in str(value or "").split(",") if part.strip()}


def _graded(entries: object) -> dict[str, tuple[str, tuple[str, ...], float | None]]:
    """NPU -> (most serious level, codes, earliest fault time) from a ``-Fault`` list."""
    graded: dict[str, tuple[str, tuple[str, ...], float | None]] = {}
    if not isinstance(entries, list):
        return graded
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("npu_name"):
            continue
        npu = str(entry["npu_name"])
        level = str(entry.get("fault_level") or UNGRADED)
        codes = tuple(sorted(_names(entry.get("fault_code"))))
        times = [
            float(item["fault_time"]) / 1000  # milliseconds
            for item in (entry.get("fault_time_and_level_map") or {}).values()
            if isinstance(item, dict)
            and isinstance(item.get("fault_time"), int | float)
            and item["fault_time"] > 0
        ]
        before = graded.get(npu)
        if before is not None:
            level = min(level, before[0], key=_rank)
            codes = tuple(sorted({*codes, *before[1]}))
            times += [before[2]] if before[2] is not None else []
        graded[npu] = (level, codes, min(times, default=None))
    return graded


def _rank(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


def node_faults(configmap: Mapping) -> tuple[str, dict[str, NpuFault]] | None:
    """The node a device-info ConfigMap is about and its unhealthy NPUs (None: not such a ConfigMap).

    Unreadable JSON counts as no fault reported: the plugin rewrites the ConfigMap within seconds, and a
    replica is never replaced on a guess.
    """
    name = str((configmap.get("metadata") or {}).get("name") or "")
    if not name.startswith(names.DEVICE_INFO_PREFIX) or name == names.DEVICE_INFO_PREFIX:
        return None
    node = name[len(names.DEVICE_INFO_PREFIX) :]
    data = configmap.get("data") or {}
    try:
        info = json.loads(data.get(names.DEVICE_INFO_KEY) or "{}")
    except ValueError:
        info = {}
    devices = (info.get("DeviceInfo") or {}).get("DeviceList") if isinstance(info, dict) else None
    devices = devices if isinstance(devices, dict) else {}
    unhealthy: set[str] = set()
    graded: dict[str, tuple[str, tuple[str, ...], float | None]] = {}
    for key, value in devices.items():
        if key.endswith(names.UNHEALTHY_SUFFIX) or key.endswith(names.NETWORK_UNHEALTHY_SUFFIX):
            unhealthy |= _names(value)
        elif key.endswith(names.FAULT_SUFFIX):
            with contextlib.suppress(ValueError):
                graded.update(_graded(json.loads(value or "[]")))
    separated = _names(data.get(names.MANUALLY_SEPARATED_KEY))
    faults = {}
    for npu in sorted(unhealthy | separated):
        level, codes, since = graded.get(npu, (UNGRADED, (), None))
        if npu in separated:
            level = min(level, "ManuallySeparateNPU", key=_rank)
        faults[npu] = NpuFault(node, npu, level, codes, since)
    return node, faults


def faults_by_node(configmaps: Iterable[Mapping]) -> dict[str, dict[str, NpuFault]]:
    """Every node's unhealthy NPUs from the device-info ConfigMaps (others in the list are ignored)."""
    result = {}
    for configmap in configmaps:
        found = node_faults(configmap)
        if found is not None:
            result[found[0]] = found[1]
    return result


def held_npus(pod: Mapping) -> tuple[str, ...] | None:
    """The NPUs a pod holds, as the device plugin or the Volcano plugin wrote them (None: not written)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for key in (names.ANNOTATION_NPUS_MOUNTED, names.ANNOTATION_NPUS_BOUND):
        held = _names(annotations.get(key))
        if held:
            return tuple(sorted(held))
    return None


def replica_faults(placement: Placement, faults: Mapping[str, Mapping[str, NpuFault]]) -> list[NpuFault]:
    """The unhealthy NPUs a replica's pods hold, each once."""
    found: dict[tuple[str, str], NpuFault] = {}
    for node, held in placement:
        for npu, fault in (faults.get(node or "") or {}).items():
            if held is None or npu in held:
                found[(fault.node, npu)] = fault
    return [found[key] for key in sorted(found)]


class FaultClock:
    """When this process first saw each unhealthy NPU, for faults the device plugin gives no time."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], float] = {}

    def stamp(
        self, faults: Mapping[str, Mapping[str, NpuFault]], now: float
    ) -> dict[str, dict[str, NpuFault]]:
        """``faults`` with every missing start filled in; NPUs no longer unhealthy are forgotten."""
        present = {(node, npu) for node, npus in faults.items() for npu in npus}
        self._seen = {key: when for key, when in self._seen.items() if key in present}
        stamped: dict[str, dict[str, NpuFault]] = {}
        for node, npus in faults.items():
            stamped[node] = {}
            for npu, fault in npus.items():
                if fault.since is None:
                    fault = replace(fault, since=self._seen.setdefault((node, npu), now))
                stamped[node][npu] = fault
        return stamped


def _value(found: Sequence[NpuFault], query: Query, now: float) -> float:
    """What the query's reduction of the window gives: the minimum counts NPUs unhealthy all window long."""
    if query.stat == "min":
        start = now - query.window.seconds
        return float(sum(1 for f in found if f.since is not None and f.since <= start))
    return float(len(found))


FaultKey = tuple[str, str, str | None, int]  # namespace, inference, role (None: a fleet of one role), replica


def answer_health(
    queries: Iterable[Query],
    fleets: Iterable[FleetState],
    faults: Mapping[str, Mapping[str, NpuFault]],
    now: float,
    step: float,
    observations: Observations,
) -> dict[FaultKey, list[NpuFault]]:
    """Answer the ``npu_unhealthy`` queries into ``observations``; returns each replica's faults.

    Every replica with pods has a full window of samples: the device plugin's view is read whole each
    cycle, and an NPU it does not list is healthy. A fleet-scoped rule reads the mean over the replicas, as
    the Prometheus entries aggregate. A query read for one role (a two-role fleet's rule names its role)
    answers for that role's replicas, numbered within the role; a fleet without that role has no series.
    """
    views = [view for fleet in fleets for view in fleet.views()]
    per_replica = {
        (view.namespace, view.name, view.role, index): replica_faults(info.placement, faults)
        for view in views
        for index, info in view.replica_states.items()
    }
    for query in queries:
        role = signal_role(query.window.expression)[1]
        samples = float(expected_samples(query.window.seconds, step))
        series: dict[tuple[str, str, int | None], float] = {}
        for view in views:
            if view.role != role:
                continue
            values = []
            for index in sorted(view.replica_states):
                found = per_replica[(view.namespace, view.name, view.role, index)]
                value = samples if query.stat == "count" else _value(found, query, now)
                values.append(value)
                if query.window.scope == "replica":
                    key = (view.namespace, view.name, index)
                    series[key] = value
                    if found:
                        observations.note(query.window, key, "; ".join(f.describe() for f in found))
            if query.window.scope == "fleet" and values:
                series[(view.namespace, view.name, None)] = sum(values) / len(values)
        observations.series[query] = series
    return {key: found for key, found in per_replica.items() if found}


def placement(pods: Iterable[Mapping]) -> Placement:
    """Per pod of a replica: its node and the NPUs it holds."""
    return tuple(((pod.get("spec") or {}).get("nodeName"), held_npus(pod)) for pod in pods)


__all__ = [
    "LEVELS",
    "FaultClock",
    "NpuFault",
    "answer_health",
    "faults_by_node",
    "held_npus",
    "node_faults",
    "placement",
    "replica_faults",
]
