"""Keeping a two-role fleet in one topology domain (spec.disaggregation.placement), as pod affinity (pure).

The KV cache moves from a prefill instance to a decode instance over the NPU network (vllm-ascend's Mooncake
connectors, SGLang's ascend backend), and the endpoint picker may pair any prefill pod with any decode pod, so
the whole fleet, not one pair, shares the domain: every pod of both roles carries an affinity term toward the
fleet's pods (its name label), over the chosen node label.

``required`` leaves no pod without a place to start: kube-scheduler's InterPodAffinity filter lets a pod whose
required terms match its own labels schedule on any node carrying the topology label while no other pod matches
the terms (``satisfyPodAffinity`` in ``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go``); the
fleet's first pod therefore picks the domain, and every later pod follows it. A node without the label never
passes a required term.
"""

from __future__ import annotations

from ..api import names
from ..api.availability import TOPOLOGY_KEYS, Availability
from ..api.disaggregation import PairPlacement

# The highest weight a preferred term takes (the API server refuses 0 and anything above 100), so the
# preference outweighs the scheduler's other scores as far as a preference can.
PREFERRED_WEIGHT = 100


def pair_term(placement: PairPlacement, name: str) -> dict:
    """The affinity term: the fleet's pods (both roles, any revision), in one domain of the topology key."""
    return {
        "labelSelector": {"matchLabels": {names.LABEL_NAME: name}},
        "topologyKey": placement.topology_key,
    }


def apply_pair_placement(pod_spec: dict, placement: PairPlacement, name: str) -> None:
    """Append the fleet's affinity term to a rendered pod spec, after the template merge (a template's own
    podAffinity terms stay beside it); mode none adds nothing."""
    if placement.mode == "none":
        return
    affinity = pod_spec.setdefault("affinity", {}).setdefault("podAffinity", {})
    if placement.mode == "required":
        key, entry = "requiredDuringSchedulingIgnoredDuringExecution", pair_term(placement, name)
    else:
        key = "preferredDuringSchedulingIgnoredDuringExecution"
        entry = {"weight": PREFERRED_WEIGHT, "podAffinityTerm": pair_term(placement, name)}
    affinity[key] = [*affinity.get(key, []), entry]


def placement_problems(placement: PairPlacement, availability: Availability | None) -> list[str]:
    """A required placement over the very domain spec.availability spreads leaders across: no second leader
    could ever start (each a sentence)."""
    if placement.mode != "required" or availability is None:
        return []
    spread_key = TOPOLOGY_KEYS[availability.spread]
    if spread_key != placement.topology_key:
        return []
    return [
        f"spec.disaggregation.placement: mode required keeps every pod in one {spread_key} domain, and "
        f"spec.availability.spread {availability.spread} spreads the leaders over at least "
        f"{availability.min_domains} of them, so a second leader could never start; use mode preferred, "
        "another topologyKey, or another spread"
    ]
