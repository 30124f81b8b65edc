"""The action registry: production selection is closed over ActionName; a test registers a seventh action.

Each action is asked directly here (decide, describe, writes, simulate), with no Prometheus and no cluster:
what the evaluation, the control loop and the simulator get from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import get_args

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.actions import ACTION_NAMES, ActionKind, ActionName
from ascend_fleet.control.actions import (
    Effect,
    RuleAction,
    UnknownAction,
    Write,
    action_for,
    builtin_action,
    deciding,
    decision_result,
    registered_action,
)
from ascend_fleet.control.actions.registry import DECIDING_ORDER
from ascend_fleet.control.model import ControlDecision, Cycle, FleetState, Held, PastAction

from .helpers import NAME, NOW, NS, fleet, rule

SHIFT = rule(action="shift_traffic", to="int8", step=25)


def cycle(state: FleetState, *held: Held) -> Cycle:
    """A cycle of ``state`` in which ``held`` held, with the fleet's whole disruption budget left."""
    by_action: dict[str, list[Held]] = {}
    for h in held:
        by_action.setdefault(h.rule.action, []).append(h)
    budget = state.max_unavailable - state.unavailable()
    return Cycle(state, NOW, 1.0, by_action, budget)


def decided(state: FleetState, *held: Held) -> Cycle:
    """Every action asked in its order, as a cycle asks them."""
    ask = cycle(state, *held)
    for action in deciding():
        action.decide(ask, ask.holding(action.name))
    return ask


def decision(action: str, **fields) -> ControlDecision:
    return ControlDecision(NS, NAME, "the rule", "npu_utilization", 0.9, action, "fleet", **fields)


# ----- the registry -----


def test_every_action_name_has_its_action_and_its_turn():
    assert get_args(ActionName) == ACTION_NAMES
    assert sorted(DECIDING_ORDER) == sorted(ACTION_NAMES)
    for name in ACTION_NAMES:
        assert builtin_action(name).name == name == action_for(name).kind.name
    assert [a.name for a in deciding()] == list(DECIDING_ORDER)


def test_an_unknown_action_is_refused():
    with pytest.raises(UnknownAction, match="reboot"):
        action_for("reboot")
    with pytest.raises(KeyError):
        decision_result(decision("reboot"))


class Reboot(RuleAction):
    """A seventh action, in this file only: registering it is all it takes to decide, describe and write."""

    kind = ActionKind("reboot", "replica", True, "RuleReboot", True, (), "reboot the node")

    def decide(self, cycle: Cycle, held: Sequence[Held]) -> None:
        for h in held:
            cycle.decide(h, self.name, replica=h.replica)

    def describe(self, decision: ControlDecision) -> str:
        return f"rebooting the node of replica {decision.replica}"

    def writes(self, decision: ControlDecision, now: float) -> tuple[Write, ...]:
        return (Write("Node", f"node-{decision.replica}", {"spec": {"unschedulable": True}}),)


def test_a_registered_action_decides_last_and_goes_away_after_the_block():
    reboot = rule(action="restart_service").model_copy(update={"action": "reboot"})
    with registered_action(Reboot()) as action:
        assert action_for("reboot") is action and deciding()[-1] is action
        with pytest.raises(ValueError, match="registered already"), registered_action(Reboot()):
            pass
        [made] = decided(fleet(), Held(reboot, "replica-1", 1, 0.9)).decisions
        assert decision_result(made) == "rebooting the node of replica 1"
        assert action.writes(made, NOW) == (Write("Node", "node-1", {"spec": {"unschedulable": True}}),)
    with pytest.raises(UnknownAction):
        action_for("reboot")
    with pytest.raises(ValueError, match="registered already"), registered_action(builtin_action("notify")):
        pass


# ----- each action: decide -----


def test_scale_up_adds_one_and_vetoes_scale_down():
    up, down = rule(action="scale_up"), rule(comparison="<", threshold="30%", action="scale_down")
    result = decided(fleet(replicas=2), Held(up, "fleet", None, 0.9), Held(down, "fleet", None, 0.1))
    assert [(d.action, d.replicas_from, d.replicas_to) for d in result.decisions] == [("scale_up", 2, 3)]
    at_bound = decided(fleet(replicas=8, max_replicas=8), Held(up, "fleet", None, 0.9))
    assert not at_bound.decisions and at_bound.notes == [f"{up.display_name()}: at maxReplicas (8)"]


def test_scale_down_drops_one_and_needs_every_replica_on_a_replica_rule():
    down = rule(comparison="<", threshold="30%", action="scale_down")
    [made] = decided(fleet(replicas=3), Held(down, "fleet", None, 0.1)).decisions
    assert (made.action, made.replicas_from, made.replicas_to) == ("scale_down", 3, 2)
    per_replica = rule(comparison="<", threshold="30%", action="scale_down", scope="replica")
    one = [Held(per_replica, "replica-0", 0, 0.1)]
    assert action_for("scale_down").holding(per_replica, one, 2) == []
    assert action_for("scale_down").holding(per_replica, one, 1) == one


def test_replace_goes_before_restart_within_one_budget():
    frag = rule(metric="mem_fragmentation", threshold="15%", action="restart_service")
    faulty = rule(metric="npu_unhealthy", threshold=0, action="replace")
    result = decided(
        fleet(replicas=3, max_unavailable=1),
        Held(frag, "replica-0", 0, 0.4),
        Held(faulty, "replica-2", 2, 1.0, "npu 3 on node-b"),
    )
    [made] = result.decisions
    assert (made.action, made.replica, made.leader) == ("replace", 2, f"{NAME}-2")
    assert result.notes == [
        f"{frag.display_name()}: replica 0 waits for the disruption budget (maxUnavailable 1)"
    ]


def test_restart_waits_out_its_cooldown_on_that_replica():
    frag = rule(metric="mem_fragmentation", threshold="15%", action="restart_service")
    past = (PastAction(NOW - 60, frag.display_name(), "restart_service", "replica-0"),)
    result = decided(fleet(actions=past), Held(frag, "replica-0", 0, 0.4))
    assert not result.decisions and "drained by restart_service 60s ago" in result.notes[0]


def test_shift_moves_its_step_once_per_cooldown():
    state = replace(fleet(), traffic={"fp16": 100, "int8": 0})
    [made] = decided(state, Held(SHIFT, "fleet", None, 0.9)).decisions
    assert made.traffic_to == (("fp16", 75), ("int8", 25))
    past = (PastAction(NOW - 10, SHIFT.display_name(), "shift_traffic", "fleet"),)
    waiting = decided(replace(state, actions=past), Held(SHIFT, "fleet", None, 0.9))
    assert not waiting.decisions and "shift cooldown" in waiting.notes[0]


def test_notify_notifies_once_per_window_per_rule():
    loud = rule(action="notify", for_="5s")
    [made] = decided(fleet(), Held(loud, "fleet", None, 0.9)).decisions
    assert made.action == "notify"
    past = (PastAction(NOW - 2, loud.display_name(), "notify", "fleet"),)
    assert not decided(fleet(actions=past), Held(loud, "fleet", None, 0.9)).decisions


# ----- each action: describe, writes, simulate -----

CARRIED = {
    "scale_up": decision("scale_up", replicas_from=2, replicas_to=3),
    "scale_down": decision("scale_down", replicas_from=3, replicas_to=2),
    "restart_service": decision("restart_service", replica=1, leader="qwen-1"),
    "replace": decision("replace", replica=1, leader="qwen-1", detail="npu 3 on node-b"),
    "shift_traffic": decision(
        "shift_traffic", traffic_from=(("fp16", 100), ("int8", 0)), traffic_to=(("fp16", 75), ("int8", 25))
    ),
    "notify": decision("notify"),
}


def test_every_action_is_asked_here():
    assert sorted(CARRIED) == sorted(ACTION_NAMES)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("scale_up", "replicas 2 -> 3"),
        ("scale_down", "replicas 3 -> 2"),
        ("restart_service", "draining replica 1 to recreate it"),
        ("replace", "draining replica 1 to recreate it away from npu 3 on node-b"),
        ("shift_traffic", "traffic fp16 100%, int8 0% -> fp16 75%, int8 25%"),
        ("notify", "notified"),
    ],
)
def test_each_action_describes_its_decision(name, text):
    assert action_for(name).describe(CARRIED[name]) == text
    assert decision_result(replace(CARRIED[name], dry_run=True)) == f"would have done: {text}"


def test_a_replace_without_a_fault_named_recreates_on_healthy_npus():
    plain = replace(CARRIED["replace"], detail=None)
    assert action_for("replace").describe(plain) == "draining replica 1 to recreate it on healthy NPUs"


def test_each_action_says_what_it_writes():
    kind = names.KIND
    assert action_for("scale_up").writes(CARRIED["scale_up"], NOW) == (
        Write(kind, NAME, {"spec": {"parallelism": {"data": 3}}}, guarded=True),
    )
    assert action_for("shift_traffic").writes(CARRIED["shift_traffic"], NOW) == (
        Write(
            kind,
            NAME,
            {"metadata": {"annotations": {names.ANNOTATION_TRAFFIC: '{"fp16":75,"int8":25}'}}},
            guarded=True,
        ),
    )
    for name, why in (("restart_service", "rule restart"), ("replace", "npu replace")):
        [drain] = action_for(name).writes(CARRIED[name], NOW)
        assert (drain.kind, drain.name, drain.guarded) == ("Pod", "qwen-1", False)
        assert drain.patch["metadata"]["annotations"][names.ANNOTATION_DRAIN_REASON] == why
        assert action_for(name).writes(replace(CARRIED[name], leader=None), NOW) == ()
    assert action_for("notify").writes(CARRIED["notify"], NOW) == ()


def test_each_action_applies_to_a_simulator_tick():
    def applied(name: str) -> Effect:
        return action_for(name).simulate(CARRIED[name], Effect())

    assert applied("scale_up") == Effect(replicas=3)
    assert applied("scale_down") == Effect(replicas=2)
    assert applied("restart_service") == Effect(restart=(1,))
    assert applied("replace") == Effect()  # the simulated NPUs never fault
    assert applied("shift_traffic") == Effect(traffic=(("fp16", 75), ("int8", 25)))
    assert applied("notify") == Effect()
    assert [a.name for a in deciding() if a.kind.restarts_healthy] == ["restart_service"]
