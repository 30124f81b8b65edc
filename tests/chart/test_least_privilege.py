"""The chart's least-privilege and credential options, installed with the real Helm library.

rbac.routing: false grants nothing routing needs and tells the operator so; prometheusAuth mounts the
Prometheus credentials and names them in the operator's settings; contradictory credentials stop the
install; every alert links its runbook. The cluster fixture comes from tests/chart/conftest.py, the checks from
tests/chart/installs.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import helm
from tests.chart.installs import (
    CRD_READ,
    HELM_DRIVER,
    NAMESPACE,
    NAMESPACE_WATCH,
    NAMESPACED_RULES,
    container,
    find,
    granted,
    node_lease_roles,
    one,
    prometheus_rules,
    settings_of,
)

RELEASES = {"defaults": None, "peering": "clusterwide-peering", "restricted": "restricted"}
# Inline values of further releases: cluster-wide without routing.
INLINE = {"clusterwide-no-routing": {"rbac": {"routing": False}}}


@pytest.fixture(scope="module")
def releases(cluster, api) -> dict[str, list[dict[str, Any]]]:
    return {
        name: helm.install(
            cluster, name, NAMESPACE, helm.values_file(values) if values else None, driver=HELM_DRIVER
        ).objects
        for name, values in RELEASES.items()
    } | {
        name: helm.install(cluster, name, NAMESPACE, values, driver=HELM_DRIVER).objects
        for name, values in INLINE.items()
    }


def test_prometheus_credentials_are_mounted_and_named_in_the_config(releases):
    objects = releases["restricted"]
    prometheus = settings_of(objects).prometheus
    assert prometheus.url == "https://prometheus.monitoring.svc:9091"
    assert prometheus.headers == {"X-Scope-OrgID": "team-a"}
    assert prometheus.basic_auth is not None and prometheus.bearer_token_file is None
    assert prometheus.basic_auth.username_file == "/etc/ascend-fleet/prometheus/basic/username"
    assert prometheus.basic_auth.password_file == "/etc/ascend-fleet/prometheus/basic/password"
    assert prometheus.ca_file == "/etc/ascend-fleet/prometheus/ca/service-ca.crt"
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["prometheus-basic"]["secret"] == {"secretName": "prometheus-basic-auth"}
    assert volumes["prometheus-ca"]["configMap"] == {"name": "prometheus-ca"}
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    for name, path in (("prometheus-basic", "basic"), ("prometheus-ca", "ca")):
        assert mounts[name] == {
            "name": name,
            "mountPath": f"/etc/ascend-fleet/prometheus/{path}",
            "readOnly": True,
        }
    # Without prometheusAuth nothing is mounted and the settings hold no credentials.
    defaults = settings_of(releases["defaults"]).prometheus
    assert (defaults.basic_auth, defaults.bearer_token_file, defaults.ca_file) == (None, None, None)
    assert not [
        v
        for v in one(releases["defaults"], "Deployment")["spec"]["template"]["spec"]["volumes"]
        if v["name"].startswith("prometheus")
    ]


@pytest.mark.parametrize(
    "values, sentence",
    [
        (
            {"prometheusAuth": {"bearerToken": {"secretName": "t"}, "basicAuth": {"secretName": "b"}}},
            "prometheusAuth.bearerToken and prometheusAuth.basicAuth are both set",
        ),
        (
            {"prometheusAuth": {"ca": {"secretName": "c", "configMapName": "c"}}},
            "prometheusAuth.ca.secretName and prometheusAuth.ca.configMapName are both set",
        ),
    ],
    ids=["token and basic auth", "CA from two places"],
)
def test_contradictory_prometheus_credentials_stop_the_install(cluster, api, values, sentence):  # noqa: F811
    with pytest.raises(helm.HelmFailed, match=sentence):
        helm.install(cluster, "refused", NAMESPACE, values, driver=HELM_DRIVER)


# Granted only with rbac.routing (the default): what spec.routing.mode inferencePool needs.
ROUTING_ONLY = {
    key: verbs
    for key, verbs in NAMESPACED_RULES.items()
    if key[0]
    in ("inference.networking.k8s.io", "inference.networking.x-k8s.io", "gateway.networking.k8s.io", "apps")
    or key in {("", "configmaps"), ("", "serviceaccounts")}
    or key[0] == "rbac.authorization.k8s.io"
    or key == ("coordination.k8s.io", "leases")  # the picker's leader Lease
}
WITHOUT_ROUTING = {
    **{key: verbs for key, verbs in NAMESPACED_RULES.items() if key not in ROUTING_ONLY},
    ("", "services"): NAMESPACED_RULES[("", "services")] - {"delete"},  # only the picker's Service is deleted
    # only the pickers' budget is deleted (the engines' goes with its owner)
    ("policy", "poddisruptionbudgets"): NAMESPACED_RULES[("policy", "poddisruptionbudgets")] - {"delete"},
}


def test_without_routing_nothing_of_routing_is_granted(releases):
    objects = releases["restricted"]
    assert granted(one(objects, "ClusterRole")) == {**CRD_READ, **NAMESPACE_WATCH}
    (role,) = [r for r in find(objects, "Role") if r not in node_lease_roles(objects)]
    assert role["metadata"]["namespace"] == "llm-prod"
    assert granted(role) == WITHOUT_ROUTING
    # The operator knows: it never lists routing objects and says why a routing spec cannot be served.
    assert settings_of(objects).routing.enabled is False
    assert settings_of(releases["defaults"]).routing.enabled is True
    assert [a for a in container(objects)["args"] if a.startswith("--namespace")] == ["--namespace=llm-prod"]


def test_every_alert_links_its_runbook(releases):
    page = (helm.CHART.parent.parent / "docs" / "runbooks.md").read_text()
    sections = {line[3:].strip().lower() for line in page.splitlines() if line.startswith("## ")}
    base = helm.default_values()["prometheusRule"]["runbookUrl"]
    chart_alerts = [r for r in prometheus_rules(releases["peering"])["groups"][0]["rules"] if "alert" in r]
    assert len(chart_alerts) == 4  # with AscendFleetOperatorDown, as the release scrapes the operator
    for rule in chart_alerts:
        url = rule["annotations"]["runbook_url"]
        assert url == f"{base}#{rule['alert'].lower()}", rule["alert"]
        assert rule["alert"].lower() in sections, f"docs/runbooks.md has no section for {rule['alert']}"


def test_cluster_wide_without_routing_grants_the_rest_cluster_wide(releases):
    objects = releases["clusterwide-no-routing"]
    assert granted(one(objects, "ClusterRole")) == {**CRD_READ, **WITHOUT_ROUTING}
    # Only the NPU health and node Lease reads, which live in kube-system and kube-node-lease whatever the rest
    # of the grant.
    assert [r["metadata"]["namespace"] for r in find(objects, "Role")] == ["kube-system", "kube-node-lease"]
    assert settings_of(objects).routing.enabled is False


def test_the_system_namespaces_are_protected_but_never_the_release_namespace(cluster, api):
    """The policy lists kube-system, kube-public and kube-node-lease, matches only the operator's ServiceAccount,
    and leaves out the release namespace (its Lease lives there); [] installs none."""

    def policy(values, namespace=NAMESPACE):
        objects = helm.install(
            cluster, f"pn-{namespace}-{len(str(values))}", namespace, values, driver=HELM_DRIVER
        ).objects
        return next((o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"), None)

    default = policy(None)
    assert default is not None
    [expression] = default["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == ["kube-system", "kube-public", "kube-node-lease"]
    [condition] = default["spec"]["matchConditions"]
    assert f"system:serviceaccount:{NAMESPACE}:" in condition["expression"]
    mixed = policy({"rbac": {"protectedNamespaces": [NAMESPACE, "kube-system"]}})
    assert mixed is not None
    assert mixed["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system"
    ]
    only_home = policy({"rbac": {"protectedNamespaces": [NAMESPACE]}})
    assert only_home is None
    assert policy({"rbac": {"protectedNamespaces": []}}) is None
