"""Which observed children belong to an AscendInference: only those whose controller is its uid."""

from __future__ import annotations

from collections.abc import Iterable

from ..api import names
from ..render.routing import PICKER_COMPONENT
from .writes import Observed


def owned_by(obj: dict, uid: str) -> bool:
    """True when ``obj`` names ``uid`` as its controlling owner; anything else is never touched."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid and ref.get("controller") for ref in refs)


def observed_children(
    uid: str,
    pods: Iterable[dict],
    services: Iterable[dict],
    pdbs: Iterable[dict],
    policies: Iterable[dict] = (),
) -> Observed:
    """Filter candidate children (found by the name label) down to the ones this object owns."""
    mine = [p for p in pods if owned_by(p, uid)]
    services_by_name = {s["metadata"]["name"]: s for s in services if owned_by(s, uid)}
    pdb = next((b for b in pdbs if owned_by(b, uid) and not is_picker_object(b)), None)
    policy = next((p for p in policies if owned_by(p, uid)), None)
    return Observed(pods=mine, services=services_by_name, pdb=pdb, network_policy=policy)


def is_picker_object(obj: dict) -> bool:
    """One of the endpoint picker's objects (its component label): the picker's disruption budget is a
    routing object, never the engines' budget, though both carry the inference's name label."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(names.LABEL_APP_COMPONENT) == PICKER_COMPONENT


# Routing kinds read by a list per pass (not watched), CRD kinds first; the picker's Service is watched with
# the other Services. Of the PodDisruptionBudgets only the picker's is a routing object (is_picker_object).
ROUTING_CRD_KINDS = ("InferencePool", "InferenceObjective", "InferenceModelRewrite", "HTTPRoute")
ROUTING_CORE_KINDS = (
    "Deployment",
    "ConfigMap",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "PodDisruptionBudget",
)


def wants_routing_list(mode: str, picker_service: dict | None, uid: str) -> bool:
    """Whether this pass must list the routing kinds.

    Always with ``mode: inferencePool``; with ``mode: service`` only while the picker's Service (watched,
    created first and deleted last) is still owned by the object, i.e. routing objects may be left to collect.
    A fleet that never used the picker lists nothing, so a cluster without the CRDs sees no request for them.
    """
    if mode == "inferencePool":
        return True
    return picker_service is not None and owned_by(picker_service, uid)
