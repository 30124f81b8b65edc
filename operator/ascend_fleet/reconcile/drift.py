"""Whether a child drifted from what the operator renders, and the merge patch that brings it back (pure).

Only the fields the operator owns count: the API server fills in others (a Service's clusterIP, a
Deployment's defaults), and other writers may own the rest.
"""

from __future__ import annotations

# What the operator owns in each routing kind (the rest is the API server's defaults or other writers').
ROUTING_OWNED = {
    "InferencePool": ("spec",),
    "InferenceObjective": ("spec",),
    "InferenceModelRewrite": ("spec",),
    "HTTPRoute": ("spec",),
    "Deployment": ("spec",),
    "ConfigMap": ("data",),
    "ServiceAccount": (),
    "Role": ("rules",),
    "RoleBinding": ("subjects",),
    "PodDisruptionBudget": ("spec",),
}


def routing_drifted(want: dict, have: dict) -> bool:
    """Labels or an owned field differ; fields the API server defaulted inside ours do not count."""
    labels = (have.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in want["metadata"]["labels"].items()):
        return True
    return any(not within(want.get(key), have.get(key)) for key in ROUTING_OWNED[want["kind"]])


def within(want, have) -> bool:
    """``want`` is contained in ``have``: equal scalars, dicts whose keys match, lists element by element."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(within(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(within, want, have))
    return want == have


def routing_patch(want: dict) -> dict:
    """A merge patch setting the labels and every owned field to the rendered ones."""
    body: dict = {"metadata": {"labels": want["metadata"]["labels"]}}
    for key in ROUTING_OWNED[want["kind"]]:
        body[key] = want.get(key)
    spec = body.get("spec")
    if want["kind"] == "Deployment" and spec:
        # Electing pickers' strategy is Recreate, which the API server refuses next to a stored rollingUpdate;
        # the selector is immutable (and always the rendered one).
        spec = {k: v for k, v in spec.items() if k != "selector"}
        strategy = spec.get("strategy", {})
        spec["strategy"] = {**strategy, "rollingUpdate": strategy.get("rollingUpdate")}
        body["spec"] = spec
    return body


# Spec fields the operator owns but never sets: a stored value (from an older operator: PDBs used to carry
# maxUnavailable, which the API server refuses next to minAvailable) is removed by the patch.
_CLEARED = {"PodDisruptionBudget": ("maxUnavailable",)}


def managed_spec(obj: dict, have: dict | None = None) -> dict:
    """The spec fields the operator owns (the API server fills in others, e.g. clusterIP), as a merge patch."""
    keys = {
        "Service": ("selector", "ports", "type", "publishNotReadyAddresses"),
        "PodDisruptionBudget": ("minAvailable", "selector"),
        "NetworkPolicy": ("podSelector", "policyTypes", "ingress"),
    }[obj["kind"]]
    spec = {k: obj["spec"][k] for k in keys if k in obj["spec"]}
    have_spec = (have or {}).get("spec") or {}
    spec.update({k: None for k in _CLEARED.get(obj["kind"], ()) if have_spec.get(k) is not None})
    return spec


def drifted(want: dict, have: dict) -> bool:
    """A Service or PDB whose labels or owned spec fields differ from the rendered ones."""
    labels = have.get("metadata", {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in want["metadata"]["labels"].items()):
        return True
    have_spec = have.get("spec") or {}
    return any(have_spec.get(k) != v for k, v in managed_spec(want, have).items())
