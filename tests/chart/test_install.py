"""`helm install` of the chart into a real Kubernetes API server, and what it creates.

Every install uses the real Helm library with its normal release storage (Secrets) against the real control
plane (``ascend_fleet_dev.real.realcluster``; the local emulator, with release records in memory, when
``ASCEND_FLEET_E2E_BACKEND=emulator``), so the API server validates every object Helm creates;
the assertions read objects back through the Kubernetes API only. Built-in objects are validated strictly
with kubernetes-validate; the operator's config file with the operator's own settings model; the RBAC rules
against the table of what the operator uses; the alerts with ``promtool test rules``.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from ascend_fleet.api.catalog import PRESET_ASCEND_FLEET, PRESETS
from tests.chart import helm
from tests.chart.installs import (
    CLUSTER_PEERING,
    CRD_READ,
    HELM_DRIVER,
    KUBERNETES_VERSION,
    NAMESPACE,
    NAMESPACE_WATCH,
    NAMESPACED_PEERING,
    NAMESPACED_RULES,
    NOT_BUILT_IN,
    RELEASES,
    WATCHED,
    container,
    find,
    granted,
    node_lease_roles,
    one,
    prometheus_rules,
    settings_of,
)
from tests.chart.promql import (
    ENGINE_LABELS,
    discovered_targets,
    exported_metric_names,
    metric_names,
    pod_port,
    promtool,
)
from tests.support.paths import CRD_FILE


@pytest.fixture(scope="module")
def installed(cluster, api) -> dict[str, helm.Release]:
    """Install every release once."""
    done = {}
    for release, values in RELEASES.items():
        done[release] = helm.install(
            cluster, release, NAMESPACE, helm.values_file(values) if values else None, driver=HELM_DRIVER
        )
    api.resources.invalidate_cache()
    return done


@pytest.fixture(scope="module")
def releases(installed) -> dict[str, list[dict[str, Any]]]:
    """Release name -> the objects of its manifest."""
    return {name: release.objects for name, release in installed.items()}


ALERT_TESTS = Path(__file__).with_name("alert-tests.yaml")


# What Helm created ------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_every_object_exists_in_the_api(api, releases, release):
    for obj in releases[release]:
        resource = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        stored = resource.get(
            name=meta["name"], namespace=meta.get("namespace") if resource.namespaced else None
        )
        assert stored.metadata.labels["app.kubernetes.io/instance"] == release
        assert stored.metadata.annotations["meta.helm.sh/release-name"] == release


def test_crds_from_the_chart_are_served(api, releases):
    crds = api.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    ours = yaml.safe_load(CRD_FILE.read_text())
    stored = crds.get(name=ours["metadata"]["name"]).to_dict()
    assert stored["spec"]["versions"][0]["schema"] == ours["spec"]["versions"][0]["schema"]
    for name in ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"):
        crds.get(name=name)
    api.resources.get(api_version="inference.ascendfleet.io/v1alpha1", kind="AscendInference")


@pytest.mark.parametrize("release", RELEASES)
def test_built_in_objects_are_valid(releases, release):
    kinds = set()
    for obj in releases[release]:
        kinds.add(obj["kind"])
        if obj["apiVersion"] not in NOT_BUILT_IN:
            k8s_validate(obj, KUBERNETES_VERSION, strict=True)
    assert {
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
    } <= kinds


def test_defaults_create_only_the_core_objects(releases):
    assert sorted(o["kind"] for o in releases["defaults"]) == sorted(
        ["ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment"]
        + ["Role", "RoleBinding"]  # the NPU health reads in kube-system
        + ["Role", "RoleBinding"]  # the node Lease reads in kube-node-lease
        # no write in kube-system and the other system namespaces (rbac.protectedNamespaces)
        + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )


def test_every_option_creates_every_kind(releases):
    kinds = {o["kind"] for o in releases["everything"]}
    assert kinds == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "KopfPeering",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "CustomResourceDefinition",  # the Inference Extension's, with inferenceExtension.installCRDs
    }
    # The operator's Role in each watched namespace, the leader-election Role in the release namespace and the
    # NPU health reads in kube-system and the node Lease reads in kube-node-lease.
    assert {o["metadata"]["namespace"] for o in find(releases["everything"], "Role")} == {
        *WATCHED,
        NAMESPACE,
        "kube-system",
        "kube-node-lease",
    }


def test_inference_extension_crds_from_the_chart_are_served(api, releases):
    """inferenceExtension.installCRDs installs the pinned upstream CRDs unchanged, and the API serves their kinds."""
    crds = api.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    pinned = [
        yaml.safe_load(p.read_text())
        for p in sorted((helm.CHART / "files" / "inference-extension").glob("*.yaml"))
    ]
    assert {o["metadata"]["name"] for o in find(releases["everything"], "CustomResourceDefinition")} == {
        crd["metadata"]["name"] for crd in pinned
    }
    assert not find(releases["defaults"], "CustomResourceDefinition")  # off by default
    for crd in pinned:
        stored = crds.get(name=crd["metadata"]["name"]).to_dict()
        assert stored["spec"]["versions"] == crd["spec"]["versions"]
    api.resources.get(api_version="inference.networking.k8s.io/v1", kind="InferencePool")
    api.resources.get(api_version="inference.networking.x-k8s.io/v1alpha2", kind="InferenceObjective")


# The operator's configuration --------------------------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_config_file_is_valid_operator_settings(releases, release):
    settings_of(releases[release])


def test_config_file_carries_the_values(releases):
    defaults = settings_of(releases["defaults"])
    assert defaults.prometheus.url is None  # empty URL: the control loop is off
    assert defaults.images == {
        "vllm-ascend": "ghcr.io/ascend-fleet/vllm-ascend:0.1.0",
        "sglang": "ghcr.io/ascend-fleet/sglang:0.1.0",
        "vllm-ascend/ascend910_93": "ghcr.io/ascend-fleet/vllm-ascend:0.1.0-a3",
        "sglang/ascend910_93": "ghcr.io/ascend-fleet/sglang:0.1.0-a3",
    }
    # The project's picker at the chart's appVersion, unless config.routing.pickerImage names another image.
    assert defaults.routing.picker_image == "ghcr.io/ascend-fleet/picker:0.1.0"
    everything = settings_of(releases["everything"])
    assert everything.routing.picker_image == "registry.example.com/inference/epp:v1.5.0"
    assert everything.prometheus.url == "http://prometheus-operated.monitoring.svc:9090"
    assert (everything.control.interval, everything.control.min_samples_fraction) == (30.0, 0.9)
    assert everything.control.catalog_preset == "npu-exporter"
    assert everything.control.catalog["ttft_p95"].startswith("histogram_quantile(0.95, sum by (namespace")
    assert (everything.reconcile.backoff_initial, everything.reconcile.backoff_max) == (10.0, 300.0)
    # An engine whose repository is empty falls back to the operator's built-in image.
    assert everything.images == {
        "vllm-ascend": "registry.example.com/ai/vllm-ascend:v0.11.0-fleet1",
        "vllm-ascend/ascend910_93": "registry.example.com/ai/vllm-ascend:v0.11.0-fleet1-a3",
    }


# The Deployment -----------------------------------------------------------------------------------------


def test_operator_pod_is_hardened(releases):
    deployment = one(releases["defaults"], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    operator = container(releases["defaults"])
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = operator["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert operator["resources"]["requests"] and operator["resources"]["limits"]["memory"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    mounts = {m["mountPath"]: m for m in operator["volumeMounts"]}
    assert mounts["/etc/ascend-fleet"]["readOnly"] is True and "/tmp" in mounts


def test_operator_command_line(releases):
    assert container(releases["defaults"])["command"] == ["ascend-fleet"]
    assert container(releases["defaults"])["args"] == [
        "run",
        "--config=/etc/ascend-fleet/config.yaml",
        "--metrics-port=8080",
        "--health-port=8081",
        "--log-level=info",
    ]
    args = container(releases["everything"])["args"]
    assert [a for a in args if a.startswith(("--namespace", "--peering", "--leader-elect"))] == [
        "--namespace=llm-prod",
        "--namespace=llm-staging",
        "--peering=ascend-fleet-peering",
        "--leader-elect-lease=ascend-fleet-leader",
    ]
    assert "--peering=peering-ascend-fleet" in container(releases["peering"])["args"]
    assert "--leader-elect-lease=peering-ascend-fleet" in container(releases["peering"])["args"]


def test_the_operator_parses_the_command_line(releases):
    """The chart's arguments are ones `ascend-fleet run` accepts."""
    from ascend_fleet.cli.main import build_parser

    for release in RELEASES:
        args = build_parser().parse_args(container(releases[release])["args"])
        assert args.config == "/etc/ascend-fleet/config.yaml" and args.health_port == 8081


def test_strategy_and_replicas_follow_leader_election(releases):
    alone = one(releases["defaults"], "Deployment")["spec"]
    assert (alone["replicas"], alone["strategy"]["type"]) == (1, "Recreate")
    peered = one(releases["peering"], "Deployment")["spec"]
    assert (peered["replicas"], peered["strategy"]["type"]) == (2, "RollingUpdate")


def test_config_change_rolls_the_pods(releases):
    def checksum(release: str) -> str:
        return one(releases[release], "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]

    assert checksum("defaults") != checksum("everything")


def test_metrics_service_selects_the_operator(releases):
    service = one(releases["defaults"], "Service")
    deployment = one(releases["defaults"], "Deployment")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_peering_objects(releases):
    assert [o["metadata"]["name"] for o in find(releases["peering"], "ClusterKopfPeering")] == [
        "peering-ascend-fleet"
    ]
    assert sorted(o["metadata"]["namespace"] for o in find(releases["everything"], "KopfPeering")) == WATCHED
    assert not find(releases["defaults"], "ClusterKopfPeering") and not find(
        releases["defaults"], "KopfPeering"
    )


# RBAC: exactly what the operator uses ----------------------------------------------------------------------


def test_cluster_wide_rbac(releases):
    role = one(releases["defaults"], "ClusterRole")
    assert granted(role) == {**CRD_READ, **NAMESPACED_RULES}
    assert granted(one(releases["peering"], "ClusterRole")) == {
        **CRD_READ,
        **NAMESPACED_RULES,
        **CLUSTER_PEERING,
    }


LEASES = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}


def test_leader_election_rbac_is_a_role_on_leases_in_the_release_namespace(releases):
    """Get, create and update (a standby reads, the first pod creates, the holder renews), nowhere else."""
    elected = [
        r for r in find(releases["peering"], "Role") if r["metadata"]["name"].endswith("-leader-election")
    ]
    assert [(r["metadata"]["namespace"], granted(r)) for r in elected] == [(NAMESPACE, LEASES)]
    (binding,) = [
        b
        for b in find(releases["peering"], "RoleBinding")
        if b["roleRef"]["name"] == elected[0]["metadata"]["name"]
    ]
    assert binding["subjects"][0]["name"] == one(releases["peering"], "ServiceAccount")["metadata"]["name"]
    assert not [r for r in find(releases["defaults"], "Role") if r not in node_roles(releases["defaults"])]


NPU_HEALTH = {("", "configmaps"): {"list"}}


def npu_health_roles(objects: list[dict]) -> list[dict]:
    return [r for r in find(objects, "Role") if r["metadata"]["name"].endswith("-npu-health")]


@pytest.mark.parametrize("release", ["defaults", "namespaced", "everything"])
def test_npu_health_is_a_list_of_configmaps_in_kube_system_only(releases, release):
    """The device plugin's health ConfigMaps live in kube-system: list there, nothing more, nowhere else."""
    assert [(r["metadata"]["namespace"], granted(r)) for r in npu_health_roles(releases[release])] == [
        ("kube-system", NPU_HEALTH)
    ]


def node_roles(objects: list[dict]) -> list[dict]:
    """The Roles outside the watched and release namespaces: NPU health and node Leases."""
    return npu_health_roles(objects) + node_lease_roles(objects)


@pytest.mark.parametrize("release", RELEASES)
def test_node_failover_lists_node_leases_in_kube_node_lease_only(releases, release):
    """The kubelets' Leases tell the operator a node died: list them there, nothing more, nowhere else."""
    assert [(r["metadata"]["namespace"], granted(r)) for r in node_lease_roles(releases[release])] == [
        ("kube-node-lease", {("coordination.k8s.io", "leases"): {"list"}})
    ]


def test_without_the_npu_health_grant_the_operator_does_not_read_it(releases):
    assert not npu_health_roles(releases["restricted"])
    assert settings_of(releases["restricted"]).control.npu_health is False
    assert settings_of(releases["defaults"]).control.npu_health is True


def test_namespaced_rbac(releases):
    assert granted(one(releases["namespaced"], "ClusterRole")) == {**CRD_READ, **NAMESPACE_WATCH}
    roles = [r for r in find(releases["namespaced"], "Role") if r not in node_roles(releases["namespaced"])]
    assert sorted(r["metadata"]["namespace"] for r in roles) == WATCHED
    for role in roles:
        assert granted(role) == NAMESPACED_RULES
    for role in find(releases["everything"], "Role"):
        if role in node_roles(releases["everything"]):
            continue
        elected = role["metadata"]["name"].endswith("-leader-election")
        assert granted(role) == (LEASES if elected else {**NAMESPACED_RULES, **NAMESPACED_PEERING})


@pytest.mark.parametrize("release", RELEASES)
def test_bindings_grant_the_roles_to_the_operator(releases, release):
    objects = releases[release]
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == account
    roles = {
        (r["kind"], r["metadata"]["name"], r["metadata"].get("namespace"))
        for r in objects
        if r["kind"] in ("ClusterRole", "Role")
    }
    bindings = find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding")
    assert len(bindings) == len(roles)
    for binding in bindings:
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"], binding["metadata"].get("namespace")) in roles
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]


def test_every_rule_says_why():
    """Each rule in the one RBAC template has a comment above it (the rendered manifest keeps them)."""
    text = (helm.CHART / "templates" / "rbac.yaml").read_text().splitlines()
    rule_lines = [i for i, line in enumerate(text) if line.lstrip().startswith("- apiGroups:")]
    assert len(rule_lines) >= 10
    for i in rule_lines:
        above = text[i - 1].strip()
        assert above.startswith("#") or text[i - 3].lstrip().startswith("- apiGroups:"), (
            f"rule at line {i + 1}"
        )


# Monitoring ---------------------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_metrics_service(releases):
    monitor = one(releases["everything"], "ServiceMonitor")
    service = one(releases["everything"], "Service")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    endpoint = monitor["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["path"], endpoint["honorLabels"]) == ("metrics", "/metrics", True)


def relabel_targets(endpoint: dict[str, Any]) -> dict[str, str]:
    return {r["targetLabel"]: r["sourceLabels"][0] for r in endpoint["relabelings"] if "sourceLabels" in r}


def test_pod_monitor_gives_the_catalog_its_labels(releases):
    monitor = one(releases["peering"], "PodMonitor")
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "ascend-fleet-engine"}
    endpoints = {e["port"]: e for e in monitor["spec"]["podMetricsEndpoints"]}
    assert set(endpoints) == {"npu-metrics", "http"}
    for endpoint in endpoints.values():
        assert relabel_targets(endpoint) == {
            "namespace": "__meta_kubernetes_namespace",
            "inference": "__meta_kubernetes_pod_label_inference_ascendfleet_io_name",
            "replica": "__meta_kubernetes_pod_label_inference_ascendfleet_io_replica",
            "rank": "__meta_kubernetes_pod_label_inference_ascendfleet_io_rank",
            "pd_role": "__meta_kubernetes_pod_label_inference_ascendfleet_io_pd_role",
            "pod": "__meta_kubernetes_pod_name",
        }
    scoped = one(releases["everything"], "PodMonitor")
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": WATCHED}


@pytest.mark.skipif(promtool() is None, reason="needs promtool (Debian: apt-get install prometheus)")
def test_pod_monitor_relabelling_in_prometheus(releases, tmp_path):
    """Prometheus applies the PodMonitor's relabelings (as the Prometheus Operator writes them into its config,
    after keeping the endpoint's port) and the engine series get the catalog's labels."""
    endpoint = one(releases["everything"], "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    snake = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    job = {
        "job_name": "engines",
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": endpoint["port"],
                "action": "keep",
            },
            *({snake.get(k, k): v for k, v in rule.items()} for rule in endpoint["relabelings"]),
        ],
    }
    targets = discovered_targets(
        job,
        [
            pod_port("llm-prod", "qwen-1", "npu-metrics", ENGINE_LABELS, "10.0.0.1:9410"),
            pod_port("llm-prod", "qwen-1", "http", ENGINE_LABELS, "10.0.0.1:8000"),
        ],
        tmp_path,
    )
    assert len(targets) == 1
    assert {k: targets[0][k] for k in ("namespace", "inference", "replica", "rank", "pod", "cluster")} == {
        "namespace": "llm-prod",
        "inference": "qwen",
        "replica": "1",
        "rank": "0",
        "pod": "qwen-1",
        "cluster": "npu-a",
    }


def test_dashboard_configmap_holds_the_dashboard(releases):
    configmap = find(releases["everything"], "ConfigMap", "fleet-operator-dashboard")[0]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Ascend"}
    dashboard = (helm.CHART / "files" / "dashboards" / "ascend-fleet.json").read_text()
    assert json.loads(configmap["data"]["ascend-fleet.json"]) == json.loads(dashboard)


# Alerts ------------------------------------------------------------------------------------------------


def without_annotations(rules: dict[str, Any]) -> dict[str, Any]:
    """promtool compares annotations too; the behaviour under test is when and for whom alerts fire."""
    return {
        "groups": [
            {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
            for g in rules["groups"]
        ]
    }


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, check=False)


@pytest.mark.skipif(promtool() is None, reason="needs promtool (Debian: apt-get install prometheus)")
def test_alerts_fire_as_the_default_rules_would(releases, tmp_path):
    rules = prometheus_rules(releases["peering"])
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(rules))
    checked = run_promtool("check", "rules", str(tmp_path / "full.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(without_annotations(rules)))
    (tmp_path / "test.yaml").write_text(ALERT_TESTS.read_text())
    tested = run_promtool("test", "rules", str(tmp_path / "test.yaml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.skipif(promtool() is None, reason="needs promtool (Debian: apt-get install prometheus)")
def test_promtool_catches_a_wrong_alert(releases, tmp_path):
    """The alert test can fail: with the utilization threshold at 0.95, qwen's alert must not fire."""
    rules = without_annotations(prometheus_rules(releases["peering"]))
    for rule in rules["groups"][0]["rules"]:
        rule["expr"] = rule["expr"].replace("> 0.85", "> 0.95")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "test.yaml").write_text(ALERT_TESTS.read_text())
    assert run_promtool("test", "rules", str(tmp_path / "test.yaml")).returncode != 0


def test_alerts_mirror_the_default_rules(releases):
    rules = {r.get("alert"): r for r in prometheus_rules(releases["everything"])["groups"][0]["rules"]}
    assert set(rules) == {
        "AscendFleetNPUUtilizationHigh",
        "AscendFleetMemoryFragmentationHigh",
        "AscendFleetMetricsMissing",
        "AscendFleetOperatorDown",
        "AscendFleetReconcileErrors",  # the values' additionalRules
    }
    # The operator's own scrape: the ServiceMonitor's job (its jobLabel, the chart's name label) in the
    # release namespace, with no target up or none at all.
    down = rules["AscendFleetOperatorDown"]
    assert (down["for"], down["labels"]["severity"]) == ("5m", "critical")
    selector = f'up{{job="ascend-fleet", namespace="{NAMESPACE}"}}'
    assert down["expr"] == f"max by (namespace, job) ({selector}) == 0\nor\nabsent({selector})"
    assert rules["AscendFleetNPUUtilizationHigh"]["for"] == "5m"
    assert rules["AscendFleetMemoryFragmentationHigh"]["for"] == "10m"
    description = rules["AscendFleetMemoryFragmentationHigh"]["annotations"]["description"]
    assert "{{ $labels.replica }}" in description and "{{ $labels.inference }}" in description
    # The same series the control loop's default catalog reads, aggregated as the default rules' scopes are.
    catalog = PRESETS[PRESET_ASCEND_FLEET]
    assert rules["AscendFleetMemoryFragmentationHigh"]["expr"] == f"{catalog['mem_fragmentation']} > 0.15"
    assert metric_names(rules["AscendFleetNPUUtilizationHigh"]["expr"]) == metric_names(
        catalog["npu_utilization"]
    )
    exported = exported_metric_names()
    for name in (
        "AscendFleetNPUUtilizationHigh",
        "AscendFleetMemoryFragmentationHigh",
        "AscendFleetMetricsMissing",
    ):
        assert metric_names(rules[name]["expr"]) <= exported, name


# NOTES.txt ---------------------------------------------------------------------------------------------


def notes_example(notes: str) -> dict[str, Any]:
    block = notes.split("<<'YAML'", 1)[1].split("\n", 1)[1].split("YAML", 1)[0]
    return yaml.safe_load(textwrap.dedent(block))


def test_notes_example_is_a_valid_ascend_inference(installed):
    from ascend_fleet.render import validate

    valid = validate(
        {
            **notes_example(installed["defaults"].notes),
            "metadata": {"name": "qwen-7b", "namespace": "default"},
        }
    )
    assert valid.layout.total_npus == 16


def test_notes_tell_what_to_do_next(installed):
    defaults, namespaced = installed["defaults"].notes, installed["namespaced"].notes
    assert "rollout status deployment/defaults-ascend-fleet" in defaults
    assert "control loop is OFF" in defaults and "podMonitor.enabled=true" in defaults
    assert "kubectl apply --server-side --force-conflicts -f <chart>/crds/" in defaults
    assert "control loop is OFF" not in namespaced
    assert "kubectl apply -n llm-prod -f -" in namespaced and "kubectl get ainf -n llm-prod" in namespaced
    assert "podMonitor.enabled=true" not in installed["everything"].notes
