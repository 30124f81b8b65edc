"""The placement an engine pod gets from spec.availability: spread constraints and short node-failure tolerations.

Only leader pods carry the spread constraint: a replica is a gang whose workers follow their leader, so
spreading leaders spreads replicas, and a multi-node replica is not forced across more domains than it needs.
"""

from __future__ import annotations

from ..api import names
from ..api.availability import TOPOLOGY_KEYS, UNREACHABLE_TAINTS, Availability


def spread_constraints(availability: Availability, name: str) -> list[dict]:
    """One DoNotSchedule constraint over the chosen domain, counting this inference's leader pods."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": TOPOLOGY_KEYS[availability.spread],
            # minDomains is only honoured with DoNotSchedule; ScheduleAnyway would stack replicas silently.
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": availability.min_domains,
            "labelSelector": {"matchLabels": {names.LABEL_NAME: name, names.LABEL_ROLE: names.ROLE_LEADER}},
        }
    ]


def failure_tolerations(availability: Availability) -> list[dict]:
    """NoExecute tolerations for unreachable and not-ready nodes, bounded by the configured seconds."""
    return [
        {
            "key": taint,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": availability.unreachable_toleration_seconds,
        }
        for taint in UNREACHABLE_TAINTS
    ]


def apply_availability(pod_spec: dict, availability: Availability | None, name: str, leader: bool) -> None:
    """Append the spread (leaders only) and the failure tolerations to a rendered pod spec; absent adds nothing.

    Appended, never replacing: the user's own constraints and tolerations (spec.scheduling, spec.template) stay.
    Where the user also tolerates an unreachable or not-ready node, Kubernetes evicts at the shorter of the two.
    """
    if availability is None:
        return
    if leader:
        pod_spec["topologySpreadConstraints"] = [
            *pod_spec.get("topologySpreadConstraints", []),
            *spread_constraints(availability, name),
        ]
    pod_spec["tolerations"] = [*pod_spec.get("tolerations", []), *failure_tolerations(availability)]
