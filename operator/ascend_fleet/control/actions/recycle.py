"""``replace`` and ``restart_service``: drain a replica to recreate it, within one disruption budget.

A replica is recycled at most once per ``restartCooldown``, and only while fewer than
``disruption.maxUnavailable`` replicas are out of service (not ready, or draining for any reason, rollouts
included); when several qualify, the worst goes first. Replacements decide before restarts (a faulty NPU
outranks a fragmented allocator), and a replica taken by one is not taken again by the other in the same
cycle. ``replace`` does not ask the domain guard: a replica on a faulty NPU is not one the fleet can count on
to keep its domain serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ...api.actions import action_kind
from ...api.times import rfc3339_ms
from ...api.units import format_duration
from ...render import drain_patch
from ..queries import extreme_stat
from .base import Effect, RuleAction, Write

if TYPE_CHECKING:
    from ..model import ControlDecision, Cycle, FleetState, Held


class _Recycle(RuleAction):
    """Drain one replica's leader; the reconciler deletes the replica after ``drainSeconds`` and recreates it."""

    drain_reason: str  # why the drain annotation says the leader drains
    guards_domain: bool  # whether the last serving replica of a domain is kept (spec.availability)

    def decide(self, cycle: Cycle, held: Sequence[Held]) -> None:
        """Each replica a rule held on is drained, worst first, while the cooldown, budget and domains allow."""
        fleet, now = cycle.fleet, cycle.now
        cooldown = fleet.autoscaling.restart_cooldown
        by_replica: dict[int, Held] = {}
        for h in held:
            if h.replica is not None and h.replica not in cycle.taken:
                by_replica.setdefault(h.replica, h)  # the first rule (in spec order) names the reason
        # Worst first: furthest beyond its threshold, relative to it; then the lowest index.
        for replica, h in sorted(by_replica.items(), key=lambda item: (-_severity(item[1]), item[0])):
            last = fleet.last(self.name, h.target)
            if last is not None and now - last < cooldown:
                cycle.note(
                    f"{h.rule.display_name()}: replica {replica} drained by {self.name} "
                    f"{now - last:.0f}s ago (restartCooldown {format_duration(cooldown)})"
                )
            elif cycle.budget <= 0:
                cycle.note(
                    f"{h.rule.display_name()}: replica {replica} waits for the disruption budget "
                    f"(maxUnavailable {fleet.max_unavailable})"
                )
            elif self.guards_domain and (keeper := _keeper_after(fleet, cycle.taken, replica)) is not None:
                cycle.note(f"{h.rule.display_name()}: no restart, {keeper}")
            else:
                leader = fleet.replica_states[replica].leader
                cycle.decide(h, self.name, replica=replica, leader=leader)
                cycle.budget -= 1
                cycle.taken.append(replica)

    def writes(self, decision: ControlDecision, now: float) -> tuple[Write, ...]:
        """The drain annotation on the replica's leader (nothing while its leader is not known)."""
        if not decision.leader:
            return ()
        return (Write("Pod", decision.leader, drain_patch(rfc3339_ms(now), self.drain_reason)),)


class RestartService(_Recycle):
    """Drain, delete and recreate the replica the condition holds on."""

    kind = action_kind("restart_service")
    drain_reason = "rule restart"
    guards_domain = True

    def describe(self, decision: ControlDecision) -> str:
        """The replica being recycled."""
        return f"draining {_role(decision)}replica {decision.replica} to recreate it"

    def simulate(self, decision: ControlDecision, effect: Effect) -> Effect:
        """The simulated replica restarts (losing its fragmentation)."""
        if decision.replica is None:
            return effect
        return replace(effect, restart=(*effect.restart, decision.replica))


class Replace(_Recycle):
    """Drain and recreate the replica on NPUs the device plugin reports healthy."""

    kind = action_kind("replace")
    drain_reason = "npu replace"
    guards_domain = False

    def describe(self, decision: ControlDecision) -> str:
        """The replica being recycled, and the fault it leaves."""
        away = f" away from {decision.detail}" if decision.detail else " on healthy NPUs"
        return f"draining {_role(decision)}replica {decision.replica} to recreate it{away}"

    # The simulated fleet's NPUs never fault, so ``simulate`` keeps the default: nothing to move away from.


def _role(decision: ControlDecision) -> str:
    """``decode `` before a two-role fleet's replica (its index counts within the role), else nothing."""
    return f"{decision.role} " if decision.role else ""


def _keeper_after(fleet: FleetState, taken: list[int], replica: int) -> str | None:
    """:meth:`FleetState.domain_keeper` once this cycle's earlier drains have taken ``taken``."""
    if not taken:
        return fleet.domain_keeper(replica)
    states = {
        i: (replace(info, draining=True) if i in taken else info) for i, info in fleet.replica_states.items()
    }
    return replace(fleet, replica_states=states).domain_keeper(replica)


def _severity(h: Held) -> float:
    threshold = h.rule.threshold or 1e-9
    distance = h.value - threshold if extreme_stat(h.rule) == "min" else threshold - h.value
    return distance / abs(threshold)
