"""The Ascend device plugin's part of a node, for the real control plane's node agent (pure state).

On an Ascend node the device plugin hands NPUs to pods (the kubelet asks it at pod start), writes on each pod
the NPUs it mounted (``huawei.com/AscendReal``), and publishes the node's NPU health in the ConfigMap
``mindx-dl-deviceinfo-<node>`` in ``kube-system``; an unhealthy NPU also leaves the node's allocatable, as the
kubelet counts only the devices the plugin reports healthy. :class:`DevicePlugin` keeps that state for the
agent's nodes and renders what the agent writes; :meth:`~ascend_fleet_dev.real.nodeagent.NodeAgent.
mark_npu_unhealthy` is the test control that breaks an NPU.

What the ConfigMap holds follows the plugin's own format (field names, the comma-joined NPU lists, the
fault list with levels, codes and millisecond fault times), which :mod:`ascend_fleet.control.npu_health`
reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_fleet.api import names
from ascend_fleet_dev.fleet.enginepods import NPU_RESOURCE_PREFIX


@dataclass
class _Fault:
    level: str
    code: str
    since_ms: int


@dataclass
class DevicePlugin:
    """NPUs per node: which pod holds which, which are unhealthy."""

    capacity: Mapping[str, Mapping[str, str]]  # node -> its capacity (the NPU resource among them)
    _held: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # pod uid -> (node, NPUs)
    _faults: dict[str, dict[str, _Fault]] = field(default_factory=dict)  # node -> NPU -> fault

    def resource(self, node: str) -> str | None:
        """The node's NPU resource name (``huawei.com/Ascend910``), None for a node without NPUs."""
        return next((key for key in self.capacity.get(node, {}) if key.startswith(NPU_RESOURCE_PREFIX)), None)

    def npus(self, node: str) -> list[str]:
        """Every NPU of the node by the plugin's names, ``Ascend910-0`` upwards."""
        resource = self.resource(node)
        if resource is None:
            return []
        prefix = resource.removeprefix(NPU_RESOURCE_PREFIX)
        return [f"{prefix}-{index}" for index in range(int(self.capacity[node][resource]))]

    def healthy(self, node: str) -> list[str]:
        return [npu for npu in self.npus(node) if npu not in self._faults.get(node, {})]

    def allocatable(self, node: str) -> dict[str, str]:
        """The node's allocatable: its capacity less the NPUs the plugin reports unhealthy."""
        allocatable = dict(self.capacity.get(node, {}))
        resource = self.resource(node)
        if resource is not None:
            allocatable[resource] = str(len(self.healthy(node)))
        return allocatable

    def assign(self, uid: str, node: str, pod: Mapping[str, Any]) -> list[str]:
        """The NPUs a new pod on ``node`` gets (the lowest healthy free ones); [] for a pod asking for none."""
        if uid in self._held:
            return self._held[uid][1]
        resource = self.resource(node)
        wanted = _requested(pod, resource) if resource else 0
        if not wanted:
            return []
        taken = {npu for held_node, npus in self._held.values() if held_node == node for npu in npus}
        free = [npu for npu in self.healthy(node) if npu not in taken]
        given = free[:wanted]
        self._held[uid] = (node, given)
        return given

    def release(self, uid: str) -> None:
        self._held.pop(uid, None)

    def break_npu(self, node: str, index: int, level: str, code: str, now: float) -> str:
        """Mark the node's NPU ``index`` unhealthy with a fault of ``level``; returns its name."""
        npus = self.npus(node)
        if not 0 <= index < len(npus):
            raise LookupError(f"{node} has NPUs 0..{len(npus) - 1}, not {index}")
        self._faults.setdefault(node, {})[npus[index]] = _Fault(level, code, int(now * 1000))
        return npus[index]

    def configmap(self, node: str, now: float) -> dict[str, Any]:
        """The node's ``mindx-dl-deviceinfo-<node>`` ConfigMap as the device plugin writes it."""
        resource = self.resource(node) or f"{NPU_RESOURCE_PREFIX}Ascend910"
        faults = self._faults.get(node, {})
        taken = {npu for held_node, npus in self._held.values() if held_node == node for npu in npus}
        fault_list = [
            {
                "fault_type": "CardUnhealthy",
                "npu_name": npu,
                "large_model_fault_level": fault.level,
                "fault_level": fault.level,
                "fault_handling": fault.level,
                "fault_code": fault.code,
                "fault_time_and_level_map": {
                    fault.code: {"fault_time": fault.since_ms, "fault_level": fault.level}
                },
            }
            for npu, fault in sorted(faults.items())
        ]
        device_list = {
            resource: ",".join(npu for npu in self.healthy(node) if npu not in taken),  # healthy and free
            resource + names.UNHEALTHY_SUFFIX: ",".join(sorted(faults)),
            resource + names.NETWORK_UNHEALTHY_SUFFIX: "",
            resource + "-Recovering": "",
            resource + names.FAULT_SUFFIX: json.dumps(fault_list),
        }
        device_info = {"DeviceList": device_list, "UpdateTime": int(now)}
        payload = {
            "DeviceInfo": device_info,
            "SuperPodID": -1,
            "ServerIndex": -1,
            "CheckCode": hashlib.sha256(json.dumps(device_info).encode()).hexdigest(),
        }
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": names.DEVICE_INFO_PREFIX + node, "namespace": names.DEVICE_INFO_NAMESPACE},
            "data": {names.DEVICE_INFO_KEY: json.dumps(payload), names.MANUALLY_SEPARATED_KEY: ""},
        }


def _requested(pod: Mapping[str, Any], resource: str) -> int:
    """NPUs a pod's containers ask for (limits, else requests), as the kubelet sums them."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(resource) or (resources.get("requests") or {}).get(
            resource
        )
        if amount:
            total += int(amount)
    return total
