"""The control loop's values (pure): the object as its rules see it, a rule that held, the cycle the actions
decide in, and the decisions they make.

The evaluation (:mod:`.evaluate`) builds these and asks the actions (:mod:`.actions`) to decide with them; both
import this module and it imports neither, so the evaluation sits above the actions and neither knows the
other's internals. What a decision means in words (``status.actions``, the Event) is its action's to say:
:func:`.actions.decision_result` and :func:`.actions.decision_message`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..api.availability import Availability
from ..api.disaggregation import RatioBound
from ..api.v1alpha1 import Action, Autoscaling, Rule

# ----- the object -----

FLEET = "fleet"  # the target of a fleet-scoped rule on a fleet of one role

Placement = tuple[
    tuple[str | None, tuple[str, ...] | None], ...
]  # per pod: its node, the NPUs it holds (None: unknown)


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica as the control loop needs it."""

    index: int
    ready: bool
    draining: bool = False
    serving_since: float | None = None  # when it last became ready; None = long ago
    leader: str | None = None  # leader pod name, which a restart drains
    domain: str | None = None  # the leader's node or zone (spec.availability.spread); None = not known
    placement: Placement = ()  # where its pods run, for the NPU health signal


@dataclass(frozen=True)
class PastAction:
    """A recorded decision (an entry of status.actions), for cooldowns."""

    time: float
    rule: str
    action: Action
    target: str
    dry_run: bool = False


@dataclass(frozen=True)
class RoleState:
    """One role of a two-role fleet (spec.disaggregation): its instances, their bounds, and its replicas."""

    replicas: int  # spec.disaggregation.<role>.parallelism.data
    min_replicas: int = 1
    max_replicas: int = 8
    pods_per_replica: int = 1
    replica_states: Mapping[int, ReplicaInfo] = field(default_factory=dict)
    limit: str | None = None  # why max_replicas is below the role's autoscaling.maxReplicas, if it is


@dataclass(frozen=True)
class FleetState:
    """One AscendInference: its rules, bounds, replicas and recorded actions.

    A two-role fleet holds its roles in ``roles``; :meth:`for_role` gives the view of one role that a rule with
    that role is checked and acted on in (``role`` set, ``replicas`` and ``replica_states`` the role's, the
    autoscaling bounds the role's).
    """

    namespace: str
    name: str
    replicas: int  # spec.parallelism.data
    rules: tuple[Rule, ...] = ()
    autoscaling: Autoscaling = field(default_factory=Autoscaling)
    max_unavailable: int = 1
    replica_states: Mapping[int, ReplicaInfo] = field(default_factory=dict)
    actions: tuple[PastAction, ...] = ()  # newest first
    availability: Availability | None = None
    traffic: Mapping[str, int] = field(default_factory=dict)  # the split between spec.variants, in percent
    builtin: int = 0  # how many of ``rules``, at their end, are built-in safety rules the spec did not list
    roles: Mapping[str, RoleState] = field(default_factory=dict)  # prefill and decode (two-role fleets)
    ratio: RatioBound | None = None  # spec.disaggregation.ratio
    role: str | None = None  # the role this is the view of (see for_role)

    @property
    def dry_run(self) -> bool:
        return self.autoscaling.dry_run

    @property
    def target(self) -> str:
        """The target a fleet-scoped rule acts on: the fleet, or the role of a role's view."""
        return self.role or FLEET

    def replica_target(self, index: int) -> str:
        """The target a replica-scoped rule acts on: ``replica-2``, or ``decode-replica-2`` in a role's view."""
        return f"{self.role}-replica-{index}" if self.role else f"replica-{index}"

    def for_role(self, role: str) -> FleetState:
        """The view of one role of a two-role fleet: its replicas, their states and its bounds."""
        state = self.roles[role]
        bounds = self.autoscaling.model_copy(
            update={"min_replicas": state.min_replicas, "max_replicas": state.max_replicas}
        )
        return dataclasses.replace(
            self, role=role, replicas=state.replicas, replica_states=state.replica_states, autoscaling=bounds
        )

    def views(self) -> list[FleetState]:
        """What the actions decide in: the fleet, or each role's view of a two-role fleet."""
        return [self.for_role(role) for role in self.roles] if self.roles and self.role is None else [self]

    def ratio_problem(self, replicas: int) -> str | None:
        """Why this role's view with ``replicas`` instances would leave spec.disaggregation.ratio (None: fine)."""
        if self.ratio is None or self.role is None:
            return None
        counts = {role: state.replicas for role, state in self.roles.items()}
        counts[self.role] = replicas
        return self.ratio.problem(counts["prefill"], counts["decode"])

    def last(self, action: str, target: str | None = None, rule: str | None = None) -> float | None:
        """Time of the newest recorded ``action`` (of this dry-run mode) on ``target`` / by ``rule``."""
        times = [
            past.time
            for past in self.actions
            if past.action == action
            and past.dry_run == self.dry_run
            and (target is None or past.target == target)
            and (rule is None or past.rule == rule)
        ]
        return max(times, default=None)

    def unavailable(self) -> int:
        """Wanted replicas out of service: missing, not ready, or draining (of both roles in a two-role fleet)."""
        if self.roles and self.role is None:
            return sum(view.unavailable() for view in self.views())
        count = 0
        for index in range(self.replicas):
            info = self.replica_states.get(index)
            if info is None or not info.ready or info.draining:
                count += 1
        return count

    def serving(self) -> dict[int, ReplicaInfo]:
        """Wanted replicas in service: ready and not draining."""
        return {
            i: info
            for i, info in self.replica_states.items()
            if i < self.replicas and info.ready and not info.draining
        }

    def domain_keeper(self, replica: int) -> str | None:
        """Why taking ``replica`` out of service would leave fewer serving domains than
        ``spec.availability.minDomains`` (None: it would not, or there is no ``spec.availability``)."""
        if self.availability is None:
            return None
        serving = self.serving()
        if replica not in serving:
            return None  # already out of service: taking it loses no domain
        spread, wanted = self.availability.spread, self.availability.min_domains
        unknown = sorted(i for i, info in serving.items() if info.domain is None)
        if unknown:
            return (
                f"the {spread} of replica{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))} is not"
                f" known, so taking replica {replica} might leave fewer than {wanted} serving {spread}s"
                f" (spec.availability.minDomains)"
            )
        domain = serving[replica].domain
        left = {info.domain for i, info in serving.items() if i != replica}
        if domain in left or len(left) >= wanted:
            return None
        return (
            f"replica {replica} is the last serving replica on {spread} {domain}: without it {len(left)}"
            f" {spread}{'s' if len(left) != 1 else ''} would serve, spec.availability.minDomains is {wanted}"
            f" (a replica serving on another {spread} lets it go)"
        )


# ----- a cycle and its decisions -----


@dataclass(frozen=True)
class ControlDecision:
    """One thing the control loop does (or, in dry run, would do) to one object."""

    namespace: str
    name: str
    rule: str  # the rule as shown to users
    metric: str | None
    value: float | None  # the window's extreme that proved the rule (its minimum for >, maximum for <)
    action: Action
    target: str  # fleet or replica-N
    dry_run: bool = False
    replicas_from: int | None = None
    replicas_to: int | None = None
    replica: int | None = None
    leader: str | None = None  # the pod a restart drains
    detail: str | None = None  # what the signal saw, where it says more than a number (a replace's fault)
    traffic_from: tuple[tuple[str, int], ...] = ()  # shift_traffic: the split before and after, in percent
    traffic_to: tuple[tuple[str, int], ...] = ()
    role: str | None = None  # the role acted on, in a two-role fleet
    held_by: str | None = None  # a scale that did not change the count: why (spec.disaggregation.ratio)


@dataclass(frozen=True)
class Held:
    """A rule that held for a target."""

    rule: Rule
    target: str
    replica: int | None
    value: float
    detail: str | None = None


@dataclass
class Cycle:
    """One object's cycle while its actions decide: what held, and what they decided so far."""

    fleet: FleetState
    now: float
    step: float  # subquery resolution: the shortest spacing of a notification
    held: Mapping[str, list[Held]]  # the rules that held, by action, in spec order
    budget: int  # replicas the disruption budget still lets go out of service in this cycle
    decisions: list[ControlDecision] = field(default_factory=list)  # in the order the actions decided
    notes: list[str] = field(default_factory=list)  # rules that held but did not act, and why
    taken: list[int] = field(default_factory=list)  # replicas drained in this cycle

    def holding(self, action: str) -> list[Held]:
        """The rules of ``action`` that held, in spec order."""
        return self.held.get(action, [])

    def decide(self, held: Held, action: Action, **extra) -> None:
        """Add the decision to carry ``action`` out for a rule that held."""
        fleet = self.fleet
        self.decisions.append(
            ControlDecision(
                fleet.namespace,
                fleet.name,
                held.rule.display_name(),
                held.rule.metric,
                held.value,
                action,
                held.target,
                fleet.dry_run,
                detail=held.detail,
                role=fleet.role,
                **extra,
            )
        )

    def note(self, text: str) -> None:
        """Add why a rule that held did not act."""
        self.notes.append(text)
