"""npu_unhealthy from the Ascend device plugin's ConfigMaps, and the replace action it drives (pure)."""

from __future__ import annotations

import dataclasses
import json

from ascend_fleet.api import names
from ascend_fleet.control.evaluate import evaluate
from ascend_fleet.control.model import PastAction
from ascend_fleet.control.npu_health import (
    FaultClock,
    NpuFault,
    answer_health,
    faults_by_node,
    held_npus,
    node_faults,
    replica_faults,
)
from ascend_fleet.control.queries import Observations, rule_queries
from ascend_fleet.control.state import action_record

from .helpers import NAME, NOW, NS, POLICY, fleet, rule

FAULT_MS = int((NOW - 120) * 1000)  # the device plugin records fault times in milliseconds
UNHEALTHY = rule(metric="npu_unhealthy", threshold=0, for_="30s", action="replace")


def device_info(
    node: str, unhealthy: str = "", network: str = "", faults: list | None = None, **data
) -> dict:
    """A ConfigMap as the device plugin writes it for ``node``."""
    devices = {
        "huawei.com/Ascend910": "Ascend910-0,Ascend910-1",
        "huawei.com/Ascend910-Unhealthy": unhealthy,
        "huawei.com/Ascend910-NetworkUnhealthy": network,
        "huawei.com/Ascend910-Recovering": "",
        "huawei.com/Ascend910-Fault": json.dumps(faults or []),
    }
    info = {"DeviceInfo": {"DeviceList": devices, "UpdateTime": int(NOW)}, "SuperPodID": -1, "CheckCode": "x"}
    return {
        "metadata": {"name": names.DEVICE_INFO_PREFIX + node, "namespace": names.DEVICE_INFO_NAMESPACE},
        "data": {names.DEVICE_INFO_KEY: json.dumps(info), **data},
    }


def fault(npu: str, level: str, code: str = "80E01801", at: int | None = FAULT_MS) -> dict:
    entry = {"fault_type": "CardUnhealthy", "npu_name": npu, "fault_level": level, "fault_code": code}
    if at is not None:
        entry["fault_time_and_level_map"] = {code: {"fault_time": at, "fault_level": level}}
    return entry


def pod(node: str, *npus: str) -> dict:
    annotations = {names.ANNOTATION_NPUS_MOUNTED: ",".join(npus)} if npus else {}
    return {"metadata": {"annotations": annotations}, "spec": {"nodeName": node}}


def placed(state, placements: dict[int, tuple]):
    replicas = {
        i: dataclasses.replace(info, placement=placements.get(i, ()))
        for i, info in state.replica_states.items()
    }
    return dataclasses.replace(state, replica_states=replicas)


def test_an_unhealthy_npu_carries_its_worst_level_codes_and_earliest_time():
    graded = [
        fault("Ascend910-2", "RestartNPU", "8C1F8609", FAULT_MS + 5000),
        fault("Ascend910-2", "SeparateNPU"),
    ]
    node, faults = node_faults(device_info("node-a", unhealthy="Ascend910-2", faults=graded))
    assert node == "node-a"
    assert faults == {
        "Ascend910-2": NpuFault("node-a", "Ascend910-2", "SeparateNPU", ("80E01801", "8C1F8609"), NOW - 120)
    }
    assert faults["Ascend910-2"].describe() == "Ascend910-2 on node-a (SeparateNPU, fault 80E01801,8C1F8609)"


def test_only_what_the_plugin_calls_unhealthy_counts():
    # A sub-health fault the plugin tolerates is in the fault list but not in the unhealthy lists.
    tolerated = device_info("node-a", faults=[fault("Ascend910-1", "SubHealthFault")])
    assert node_faults(tolerated) == ("node-a", {})
    network = node_faults(device_info("node-a", network="Ascend910-3"))
    assert network is not None and network[1]["Ascend910-3"].level == "Unhealthy"
    by_hand = node_faults(device_info("node-a", **{names.MANUALLY_SEPARATED_KEY: "Ascend910-5"}))
    assert by_hand is not None and by_hand[1]["Ascend910-5"].level == "ManuallySeparateNPU"


def test_other_configmaps_and_unreadable_ones_report_nothing():
    assert node_faults({"metadata": {"name": "kube-root-ca.crt"}, "data": {}}) is None
    broken = {"metadata": {"name": names.DEVICE_INFO_PREFIX + "node-b"}, "data": {names.DEVICE_INFO_KEY: "{"}}
    assert faults_by_node([broken, {"metadata": {"name": "other"}}]) == {"node-b": {}}


def test_a_pod_holds_the_npus_the_plugin_wrote_or_its_whole_node():
    faults = faults_by_node([device_info("node-a", unhealthy="Ascend910-2")])
    assert held_npus(pod("node-a", "Ascend910-3", "Ascend910-2")) == ("Ascend910-2", "Ascend910-3")
    assert replica_faults((("node-a", ("Ascend910-0", "Ascend910-1")),), faults) == []
    assert [f.npu for f in replica_faults((("node-a", ("Ascend910-2",)),), faults)] == ["Ascend910-2"]
    assert [f.npu for f in replica_faults((("node-a", None),), faults)] == ["Ascend910-2"]  # not written: all
    assert replica_faults((("node-b", None),), faults) == []


def test_a_fault_without_a_time_starts_when_first_seen_and_is_forgotten_once_healed():
    clock = FaultClock()
    untimed = faults_by_node([device_info("node-a", unhealthy="Ascend910-2")])
    assert clock.stamp(untimed, NOW)["node-a"]["Ascend910-2"].since == NOW
    assert clock.stamp(untimed, NOW + 10)["node-a"]["Ascend910-2"].since == NOW
    clock.stamp(faults_by_node([device_info("node-a")]), NOW + 20)
    assert clock.stamp(untimed, NOW + 30)["node-a"]["Ascend910-2"].since == NOW + 30


def answered(state, configmaps, now=NOW, r=UNHEALTHY):
    observations = Observations()
    faults = FaultClock().stamp(faults_by_node(configmaps), now)
    answer_health(
        rule_queries(r, POLICY.catalog, POLICY.step), [state], faults, now, POLICY.step, observations
    )
    return observations


def test_a_replica_on_a_faulty_npu_is_replaced_naming_the_npu_node_and_fault():
    state = placed(fleet(UNHEALTHY), {0: (("node-a", ("Ascend910-0",)),), 1: (("node-b", ("Ascend910-2",)),)})
    info = [
        device_info("node-a"),
        device_info("node-b", unhealthy="Ascend910-2", faults=[fault("Ascend910-2", "SeparateNPU")]),
    ]
    result = evaluate(state, answered(state, info), NOW, POLICY)
    [decision] = result.decisions
    assert (decision.action, decision.target, decision.leader, decision.value) == (
        "replace",
        "replica-1",
        f"{NAME}-1",
        1,
    )
    record = action_record(decision, NOW)
    assert (
        record["result"]
        == "draining replica 1 to recreate it away from Ascend910-2 on node-b (SeparateNPU, fault 80E01801)"
    )
    assert record["rule"] == "npu_unhealthy > 0 for 30s -> replace" and result.metrics.available


def test_a_fault_younger_than_the_window_does_not_act_yet():
    state = placed(fleet(UNHEALTHY, replicas=1), {0: (("node-b", None),)})
    young = [
        device_info(
            "node-b",
            unhealthy="Ascend910-2",
            faults=[fault("Ascend910-2", "SeparateNPU", at=int((NOW - 10) * 1000))],
        )
    ]
    assert not evaluate(state, answered(state, young), NOW, POLICY).decisions
    assert evaluate(state, answered(state, young, now=NOW + 25), NOW + 25, POLICY).decisions


def test_replace_keeps_the_budget_and_cooldown_but_not_the_domain_guard():
    everywhere = {i: ((f"node-{i}", None),) for i in range(2)}
    info = [
        device_info(f"node-{i}", "Ascend910-0", faults=[fault("Ascend910-0", "SeparateNPU")])
        for i in range(2)
    ]
    state = placed(fleet(UNHEALTHY, domains=("node-0", "node-1")), everywhere)
    [only] = evaluate(state, answered(state, info), NOW, POLICY).decisions  # maxUnavailable 1
    assert only.target == "replica-0"
    recent = (PastAction(NOW - 60, UNHEALTHY.display_name(), "replace", "replica-0"),)
    state = placed(fleet(UNHEALTHY, domains=("node-0", "node-1"), actions=recent), everywhere)
    result = evaluate(state, answered(state, info), NOW, POLICY)
    assert [d.target for d in result.decisions] == ["replica-1"]  # replica-0 waits for restartCooldown
    assert any("drained by replace 60s ago" in note for note in result.notes)


def test_replace_goes_before_a_restart_of_the_same_cycle():
    frag = rule(metric="mem_fragmentation", threshold="15%", action="restart_service")
    state = placed(fleet(UNHEALTHY, frag), {1: (("node-b", None),)})
    observations = answered(
        state, [device_info("node-b", "Ascend910-0", faults=[fault("Ascend910-0", "RestartNPU")])]
    )
    extreme, count = rule_queries(frag, POLICY.catalog, POLICY.step)
    observations.series[extreme] = {(NS, NAME, 0): 0.5, (NS, NAME, 1): 0.5}
    observations.series[count] = {(NS, NAME, 0): 5, (NS, NAME, 1): 5}
    [decision] = evaluate(state, observations, NOW, POLICY).decisions
    assert (decision.action, decision.target) == ("replace", "replica-1")
