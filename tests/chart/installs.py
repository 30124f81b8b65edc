"""What the chart tests share: the releases they install, how to find objects in a manifest, and the table of
what the operator may do (its RBAC), checked against the chart's Roles."""

from __future__ import annotations

import os
from typing import Any

import yaml

from ascend_fleet.api.settings import OperatorSettings

KUBERNETES_VERSION = "1.33"
NAMESPACE = "ascend-system"
WATCHED = ["llm-prod", "llm-staging"]
# Release name -> values file (tests/chart/values/), or None for the chart's defaults.
RELEASES = {
    "defaults": None,
    "namespaced": "namespaced",
    "peering": "clusterwide-peering",
    "everything": "all-options",
    "restricted": "restricted",
}
# Kinds no bundled schema covers: the Prometheus Operator's (test_install.py checks their shape) and kopf's peering.
NOT_BUILT_IN = {"monitoring.coreos.com/v1", "kopf.dev/v1"}
MONITORING_KINDS = {
    "ServiceMonitor": "servicemonitors",
    "PodMonitor": "podmonitors",
    "PrometheusRule": "prometheusrules",
}


def stand_in_monitoring_crd(kind: str, plural: str) -> dict[str, Any]:
    """The Prometheus Operator's CRDs in name only (what Helm needs to map the kinds); no schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


REAL = os.environ.get("ASCEND_FLEET_E2E_BACKEND", "real") == "real"
HELM_DRIVER = "secret" if REAL else "memory"  # the emulator cannot store Helm's release Secrets


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = find(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def settings_of(objects: list[dict[str, Any]]) -> OperatorSettings:
    configmap = find(
        objects, "ConfigMap", next(o["metadata"]["name"] for o in objects if o["kind"] == "Deployment")
    )[0]
    return OperatorSettings.model_validate(yaml.safe_load(configmap["data"]["config.yaml"]))


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


# RBAC: exactly what the operator uses ----------------------------------------------------------------------

# (apiGroup, resource) -> verbs, as the operator uses them in any namespace it serves.
# What the operator uses (tests/e2e/test_rbac.py checks this against its recorded requests).
# Kinds the operator watches (or lists each pass) and creates, patches back and deletes as their owner.
WATCHED_AND_OWNED = frozenset({"get", "list", "watch", "create", "patch", "delete"})
NAMESPACED_RULES = {
    ("inference.ascendfleet.io", "ascendinferences"): {"get", "list", "watch", "patch"},
    ("inference.ascendfleet.io", "ascendinferences/status"): {"patch"},
    # blockOwnerDeletion on the children (checked at admission, see tests/realapi/test_rbac_admission.py)
    ("inference.ascendfleet.io", "ascendinferences/finalizers"): {"update"},
    ("", "pods"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "services"): WATCHED_AND_OWNED,
    ("policy", "poddisruptionbudgets"): WATCHED_AND_OWNED,
    ("", "events"): {"create", "patch"},
    # the fleet's NetworkPolicy: watched, created, patched back, deleted when config.networkPolicy is off
    ("networking.k8s.io", "networkpolicies"): WATCHED_AND_OWNED,
    # spec.routing.mode inferencePool: listed per pass, created, patched back, collected
    ("inference.networking.k8s.io", "inferencepools"): WATCHED_AND_OWNED,
    ("inference.networking.x-k8s.io", "inferenceobjectives"): WATCHED_AND_OWNED,
    # the split between spec.variants
    ("inference.networking.x-k8s.io", "inferencemodelrewrites"): WATCHED_AND_OWNED,
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},  # the picker's leader Lease, likewise
    ("gateway.networking.k8s.io", "httproutes"): {"get", "list", "create", "patch", "delete"},
    ("apps", "deployments"): {"get", "list", "create", "patch", "delete"},
    ("", "configmaps"): {"get", "list", "create", "patch", "delete"},
    ("", "serviceaccounts"): {"get", "list", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "roles"): {"get", "list", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "list", "create", "patch", "delete"},
}
CRD_READ = {("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"}}
NAMESPACE_WATCH = {
    ("", "namespaces"): {"list", "watch"}
}  # namespaced kopf only (cluster-wide never reads them)
CLUSTER_PEERING = {("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "patch"}}
NAMESPACED_PEERING = {("kopf.dev", "kopfpeerings"): {"get", "list", "watch", "patch"}}


def granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """A Role's rules as (apiGroup, resource) -> verbs; no wildcards, no resourceNames, nothing granted twice."""
    table: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource, *rule["verbs"]), f"wildcard in {rule}"
                assert (group, resource) not in table, f"{group}/{resource} granted twice"
                table[(group, resource)] = set(rule["verbs"])
    return table


def prometheus_rules(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"groups": one(objects, "PrometheusRule")["spec"]["groups"]}


def node_lease_roles(objects: list[dict]) -> list[dict]:
    """The Role that lets the operator list the node Leases in kube-node-lease (node failover)."""
    return [r for r in find(objects, "Role") if r["metadata"]["name"].endswith("-node-leases")]
