"""Routing planning: create, patch back and collect the objects of ``spec.routing`` (pure).

The endpoint picker (its Service, Deployment, RBAC and ConfigMap) and, in mode ``inferencePool``, the
InferencePool, InferenceObjectives and HTTPRoute. The picker's Service is created first and deleted
last: it is in the watch cache and tells a fleet that routing objects may be left to collect.
"""

from __future__ import annotations

from ..api.settings import ReconcileSettings
from ..api.v1alpha1 import AscendInference
from ..layout import plan
from ..observed import observed_replicas
from ..render import Owner
from ..render.routing import PickerSettings, picker_name, render_routing
from ..status.derive import split_in_force
from .drift import drifted, managed_spec, routing_drifted, routing_patch
from .timing import REQUEUE_AFTER_WRITE_SECONDS
from .writes import Delete, Event, Observed, PassPlan, Patch

# The CRD each routing kind comes from, and what installs it (the sentence in Ready=False/RoutingUnavailable).
ROUTING_CRDS = {
    "InferencePool": (
        "inferencepools.inference.networking.k8s.io",
        "the chart's inferenceExtension.installCRDs=true installs it",
    ),
    "InferenceObjective": (
        "inferenceobjectives.inference.networking.x-k8s.io",
        "the chart's inferenceExtension.installCRDs=true installs it",
    ),
    "InferenceModelRewrite": (
        "inferencemodelrewrites.inference.networking.x-k8s.io",
        "the chart's inferenceExtension.installCRDs=true installs it",
    ),
    "HTTPRoute": ("httproutes.gateway.networking.k8s.io", "install the Gateway API standard CRDs"),
}
# Delete order: the CRD kinds first and the picker's Service last. The picker's Service is in the watch cache
# and tells a fleet in mode service that routing objects may be left to collect (see observe_routing), so it
# is the first routing object created and the last one deleted.
ROUTING_DELETE_ORDER = (
    "HTTPRoute",
    "InferenceModelRewrite",
    "InferenceObjective",
    "InferencePool",
    "PodDisruptionBudget",
    "Deployment",
    "ConfigMap",
    "RoleBinding",
    "Role",
    "ServiceAccount",
    "Service",
)


def _routing_off(obj: AscendInference) -> str | None:
    """The Ready sentence for a fleet asking for routing from an operator installed without it."""
    if obj.spec.routing.mode != "inferencePool":
        return None
    return (
        "spec.routing.mode inferencePool is off in this installation: the operator runs with routing.enabled: "
        "false (the chart's rbac.routing: false) and holds no permissions for routing objects; use mode service, "
        "or reinstall with rbac.routing: true"
    )


def plan_routing(
    obj: AscendInference,
    owner: Owner,
    observed: Observed,
    now: float,
    settings: ReconcileSettings,
    picker: PickerSettings | None,
    result: PassPlan,
    enabled: bool = True,
) -> str | None:
    """Create, patch back and collect the routing objects of ``spec.routing``; the Ready sentence if it cannot.

    Not ``enabled`` (the operator holds no routing permissions): nothing of routing is read or written.

    With a CRD of a needed kind missing, nothing of routing is created or deleted (the engines still are):
    the cluster needs that CRD first, and Ready says which.
    """
    if not enabled:
        return _routing_off(obj)
    groups = observed_replicas(observed.pods)
    desired = render_routing(
        obj.spec, owner, picker, split_in_force(obj, groups, plan(obj.spec).pods_per_replica)
    )
    needed = {o["kind"] for o in desired} & set(ROUTING_CRDS)
    missing = sorted(needed & observed.routing_missing)
    if missing:
        crds = "; ".join(f"{ROUTING_CRDS[k][0]} ({ROUTING_CRDS[k][1]})" for k in missing)
        return f"spec.routing.mode inferencePool needs CRDs the cluster does not serve: {crds}"
    service_name = picker_name(owner.name)
    have_service = observed.services.get(service_name)
    wanted: set[tuple[str, str]] = set()
    # The picker's Service first; everything else once the cache shows it (see ROUTING_DELETE_ORDER).
    ordered = sorted(
        desired, key=lambda o: not (o["kind"] == "Service" and o["metadata"]["name"] == service_name)
    )
    for want in ordered:
        kind, name = want["kind"], want["metadata"]["name"]
        wanted.add((kind, name))
        is_service = kind == "Service"
        have = have_service if is_service else observed.routing.get((kind, name))
        if have is None:
            if not is_service and have_service is None:
                continue
            wait = observed.held_back(kind, name, now, settings)
            if wait is not None:
                result.later(wait)
            else:
                result.creates.append(want)
        elif (have.get("metadata") or {}).get("deletionTimestamp"):
            result.later(
                REQUEUE_AFTER_WRITE_SECONDS
            )  # a collected one still going: recreate it once it is gone
        elif is_service and drifted(want, have):
            body = {"metadata": {"labels": want["metadata"]["labels"]}, "spec": managed_spec(want, have)}
            result.patches.append(Patch(kind, name, body))
            result.events.append(Event("Normal", "Updated", f"updated {kind} {name}"))
        elif not is_service and routing_drifted(want, have):
            result.patches.append(Patch(kind, name, routing_patch(want)))
            result.events.append(Event("Normal", "Updated", f"updated {kind} {name}"))
    leftovers = [
        (k, n) for (k, n), o in observed.routing.items() if (k, n) not in wanted and not _deleting(o)
    ]
    if have_service is not None and ("Service", service_name) not in wanted and not _deleting(have_service):
        leftovers.append(("Service", service_name))
    leftovers.sort(key=lambda kn: (ROUTING_DELETE_ORDER.index(kn[0]), kn[1]))
    if leftovers:
        result.deletes.extend(Delete(k, n) for k, n in leftovers)
        result.events.append(
            Event("Normal", "Deleted", "deleted " + ", ".join(f"{k} {n}" for k, n in leftovers))
        )
    return None


def _deleting(obj: dict) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))
