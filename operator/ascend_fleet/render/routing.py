"""Routing objects of ``spec.routing.mode: inferencePool``: the InferencePool, its endpoint picker, the objectives.

With ``mode: service`` (the default) requests reach the serving leaders through the ClusterIP Service alone
and this module renders nothing. With ``inferencePool`` it renders, all owned by the AscendInference:

- an ``InferencePool`` (Gateway API Inference Extension, ``inference.networking.k8s.io/v1``) named like the
  inference, selecting the same serving leaders as the Service: a drain flips the serving label, so a
  draining replica leaves the pool exactly as it leaves the Service;
- the endpoint picker (EPP): ServiceAccount, Role and RoleBinding (read pods, the pool and its objectives),
  ConfigMap with its ``EndpointPickerConfig`` (:mod:`.picker_config`: queue, KV-cache and prefix-cache scorers over the engines'
  own metrics; flow control with one priority band per class, the class's ``maxQueue`` as the band's
  request limit; with classes, the prompt-length classifier, which the project's picker runs in front of
  itself), Deployment and Service (ext_proc gRPC on 9002);
- one ``InferenceObjective`` (``inference.networking.x-k8s.io/v1alpha2``) per priority class, named
  ``<inference>-<class>``: a client picks its class by sending ``x-gateway-inference-objective: <that name>``;
  a request without the header gets the class its prompt length reaches;
- an ``HTTPRoute`` from the Gateway named in ``spec.routing.gateway`` to the pool, when one is named;
- with ``spec.variants``, an ``InferenceModelRewrite`` (``inference.networking.x-k8s.io/v1alpha2``) named like
  the inference: the picker rewrites a request's ``model`` from ``model.name`` to one variant's served name,
  drawn by the weights of the fleet's traffic split (variants at 0 % are left out: upstream weights start at 1).

Pure: the same spec gives the same objects; nothing here talks to a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from ..api import names
from ..api.images import DEFAULT_PICKER_IMAGE
from ..api.v1alpha1 import AscendInferenceSpec, PriorityClass
from ..api.variants import default_weights, served_name
from .metadata import Owner, common_labels, metadata, serving_selector
from .picker_config import CLASSIFIER_PLUGIN, classifier_plugin, classifies, objective_name, picker_config

POOL_API_VERSION = "inference.networking.k8s.io/v1"
OBJECTIVE_API_VERSION = "inference.networking.x-k8s.io/v1alpha2"
HTTPROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
PICKER_GRPC_PORT = 9002  # ext_proc, what Envoy calls
PICKER_HEALTH_PORT = 9003  # gRPC health
PICKER_METRICS_PORT = 9090
PICKER_CONFIG_FILE = "epp.yaml"
PICKER_CONFIG_DIR = "/config"
PICKER_COMPONENT = names.COMPONENT_PICKER
PICKER_UID = 65532  # the user images/picker runs as (the distroless "nonroot" user of the upstream image)
# The Inference Extension release whose picker and CRDs the operator is tested with: tools/epp builds the
# project's picker (DEFAULT_PICKER_IMAGE) on it, and the chart ships its CRDs.
PICKER_RELEASE = "v1.5.0"
# The project's picker runs the classifier in front of itself, in the same process (tools/epp/front): the front
# takes the picker's gRPC port and the picker listens on this loopback port behind it, without TLS.
CLASSIFY_FLAG = "--classify-requests"
CLASSIFY_PICKER_PORT_FLAG = "--classify-picker-port"
CLASSIFY_PICKER_PORT = 9012
CLASSIFIER_GRPC_PORT = 9004  # the upstream router's defaults
CLASSIFIER_HEALTH_PORT = 9005
CLASSIFIER_METRICS_PORT = 9091
# With routing.picker.leaderElection, several picker pods elect a leader through a Lease (the picker's own flag,
# as the upstream chart sets it in its active-passive mode); only the leader answers its gRPC health service
# "readiness", so only it is Ready and in the picker Service, while "liveness" passes on every pod (a standby is
# alive, not broken). Without it every replica serves (upstream's active-active mode).
PICKER_LEADER_ELECTION_FLAG = "--ha-enable-leader-election"
PICKER_HEALTH_SERVICE = "inference-extension"  # one replica: live and ready once the pool is synced
PICKER_LIVENESS_SERVICE = "liveness"
PICKER_READINESS_SERVICE = "readiness"


@dataclass(frozen=True)
class PickerSettings:
    """What the operator's settings decide about the endpoint picker."""

    image: str = DEFAULT_PICKER_IMAGE


def picker_name(name: str) -> str:
    """The endpoint picker's Deployment, Service, ConfigMap and ServiceAccount: ``<name>-epp``."""
    return f"{name}-epp"


def render_routing(
    spec: AscendInferenceSpec,
    owner: Owner,
    picker: PickerSettings | None = None,
    weights: Mapping[str, int] | None = None,
) -> list[dict]:
    """Every routing object the spec asks for, in apply order (empty for ``mode: service``).

    ``weights`` is the fleet's traffic split between its variants (default: all on the first).
    """
    if spec.routing.mode != "inferencePool":
        return []
    picker = picker or PickerSettings()
    objects = [
        render_pool(spec, owner),
        *render_picker(spec, owner, picker),
        *(render_objective(owner, c) for c in spec.routing.classes),
    ]
    if spec.variants:
        objects.append(render_rewrite(spec, owner, weights or default_weights(spec.variants)))
    if spec.routing.gateway is not None:
        objects.append(render_httproute(spec, owner))
    return objects


def render_pool(spec: AscendInferenceSpec, owner: Owner) -> dict:
    """The InferencePool over the serving leaders, pointing at the endpoint picker."""
    return {
        "apiVersion": POOL_API_VERSION,
        "kind": "InferencePool",
        "metadata": metadata(owner, owner.name, common_labels(owner.name)),
        "spec": {
            "selector": {"matchLabels": serving_selector(owner.name)},
            "targetPorts": [{"number": spec.engine.port}],
            "endpointPickerRef": {
                "name": picker_name(owner.name),
                "port": {"number": PICKER_GRPC_PORT},
                # FailClose by default: without the picker no request is routed, so a fleet that asked
                # for priorities does not silently fall back to random choice.
                "failureMode": spec.routing.picker.failure_mode,
            },
        },
    }


def render_objective(owner: Owner, priority_class: PriorityClass) -> dict:
    """The InferenceObjective of one priority class."""
    return {
        "apiVersion": OBJECTIVE_API_VERSION,
        "kind": "InferenceObjective",
        "metadata": metadata(owner, objective_name(owner.name, priority_class), common_labels(owner.name)),
        "spec": {
            "priority": priority_class.priority,
            "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": owner.name},
        },
    }


def render_rewrite(spec: AscendInferenceSpec, owner: Owner, weights: Mapping[str, int]) -> dict:
    """The InferenceModelRewrite that splits requests for ``model.name`` between the variants' served names."""
    targets = [
        {"modelRewrite": served_name(spec.model.name, v), "weight": weights.get(v.name, 0)}
        for v in spec.variants
        if weights.get(v.name, 0) > 0
    ]
    return {
        "apiVersion": OBJECTIVE_API_VERSION,
        "kind": "InferenceModelRewrite",
        "metadata": metadata(owner, owner.name, common_labels(owner.name)),
        "spec": {
            "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": owner.name},
            "rules": [
                {"matches": [{"model": {"type": "Exact", "value": spec.model.name}}], "targets": targets}
            ],
        },
    }


def render_httproute(spec: AscendInferenceSpec, owner: Owner) -> dict:
    """An HTTPRoute from the named Gateway to the InferencePool (all paths)."""
    gateway = spec.routing.gateway
    assert gateway is not None
    parent: dict = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    return {
        "apiVersion": HTTPROUTE_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": metadata(owner, owner.name, common_labels(owner.name)),
        "spec": {
            "parentRefs": [parent],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [
                        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": owner.name}
                    ],  # fmt: skip
                    # Long generations outlast a gateway's default request timeout.
                    "timeouts": {"request": "300s"},
                }
            ],
        },
    }


def picker_args(
    owner: Owner,
    *,
    grpc_port: int = PICKER_GRPC_PORT,
    health_port: int = PICKER_HEALTH_PORT,
    metrics_port: int = PICKER_METRICS_PORT,
    leader_election: bool = False,
    classify: bool = False,
    classify_picker_port: int = CLASSIFY_PICKER_PORT,
) -> list[str]:
    """The endpoint picker's command-line flags (the image's entrypoint is the picker).

    The ports are the pod's; a picker run as a local process (tests, benchmarks) picks free ones.
    ``leader_election``: one of several replicas, which elect a leader. ``classify``: the classifier of the
    picker's configuration runs in front of the picker on ``grpc_port``, the picker behind it on
    ``classify_picker_port`` (loopback).
    """
    election = [PICKER_LEADER_ELECTION_FLAG] if leader_election else []
    front = [CLASSIFY_FLAG, CLASSIFY_PICKER_PORT_FLAG, str(classify_picker_port)] if classify else []
    return [*election, *front,
        "--pool-name", owner.name,
        "--pool-namespace", owner.namespace,
        "--pool-group", "inference.networking.k8s.io",
        "--config-file", f"{PICKER_CONFIG_DIR}/{PICKER_CONFIG_FILE}",
        "--grpc-port", str(grpc_port),
        "--grpc-health-port", str(health_port),
        "--metrics-port", str(metrics_port),
        # The picker's own /metrics stays readable by Prometheus without a token review.
        "--metrics-endpoint-auth=false",
        "--tracing=false",
        "--zap-encoder", "json",
    ]  # fmt: skip


def classifier_args(
    spec: AscendInferenceSpec,
    owner: Owner,
    *,
    grpc_port: int = CLASSIFIER_GRPC_PORT,
    health_port: int = CLASSIFIER_HEALTH_PORT,
    metrics_port: int = CLASSIFIER_METRICS_PORT,
) -> list[str]:
    """The classifier's command line: the upstream body-based router's flags with one plugin, ours."""
    plugin = json.dumps(classifier_plugin(spec, owner), separators=(",", ":"))
    return [
        "--plugin", f"{CLASSIFIER_PLUGIN}:{CLASSIFIER_PLUGIN}:{plugin}",
        "--streaming",  # Envoy streams the body full-duplex, as it does to the picker
        "--grpc-port", str(grpc_port),
        "--grpc-health-port", str(health_port),
        "--metrics-port", str(metrics_port),
        "--metrics-endpoint-auth=false",
        "--zap-encoder", "json",
    ]  # fmt: skip


def render_picker(spec: AscendInferenceSpec, owner: Owner, picker: PickerSettings) -> list[dict]:
    """ServiceAccount, Role, RoleBinding, ConfigMap, Deployment and Service of the endpoint picker."""
    name = picker_name(owner.name)
    labels = {**common_labels(owner.name), names.LABEL_APP_COMPONENT: PICKER_COMPONENT}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(owner, name, labels),
        "data": {PICKER_CONFIG_FILE: yaml.safe_dump(picker_config(spec, owner), sort_keys=False)},
    }
    service_account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(owner, name, labels),
    }
    budget = (
        [] if picker_elects(spec) or spec.routing.picker.replicas < 2 else [_picker_budget(owner, labels)]
    )
    return [
        service_account,
        *_picker_access(owner, labels, picker_elects(spec)),
        config,
        _picker_deployment(spec, owner, picker, labels),
        _picker_service(owner, labels),
        *budget,
    ]


def picker_elects(spec: AscendInferenceSpec) -> bool:
    """Whether the picker replicas elect a leader (only it serves) rather than all serving side by side."""
    return spec.routing.picker.leader_election and spec.routing.picker.replicas > 1


def _picker_budget(owner: Owner, labels: dict[str, str]) -> dict:
    """At most one serving picker away at a time by a voluntary disruption (a drain, an eviction). Only for
    pickers that all serve: a standby is never Ready, so a budget over elected pickers would block every drain."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(owner, picker_name(owner.name), labels),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _picker_selector(owner)}},
    }


def _picker_selector(owner: Owner) -> dict[str, str]:
    return {names.LABEL_NAME: owner.name, names.LABEL_APP_COMPONENT: PICKER_COMPONENT}


def _picker_access(owner: Owner, labels: dict[str, str], elects: bool) -> list[dict]:
    """The Role and RoleBinding that let the picker read pods, its pool and the objectives (and, with
    ``elects``, hold its leader Lease and record the election's Events)."""
    name = picker_name(owner.name)
    read = ["get", "list", "watch"]
    election = [
        # controller-runtime's Lease lock reads the Lease, creates it when absent and updates it to renew it
        # or take it over.
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(owner, name, labels),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": read},
            {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": read},
            {
                "apiGroups": ["inference.networking.x-k8s.io"],
                "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                "verbs": read,
            },  # fmt: skip
            *(election if elects else []),
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(owner, name, labels),
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
    }
    return [role, binding]


def _picker_container(owner: Owner, picker: PickerSettings, elects: bool, classify: bool) -> dict:
    def health(service: str) -> dict:
        return {"grpc": {"port": PICKER_HEALTH_PORT, "service": service}}

    live = health(PICKER_LIVENESS_SERVICE if elects else PICKER_HEALTH_SERVICE)
    ready = health(PICKER_READINESS_SERVICE if elects else PICKER_HEALTH_SERVICE)
    return {
        "name": "epp",
        "image": picker.image,
        "imagePullPolicy": "IfNotPresent",
        "args": picker_args(owner, leader_election=elects, classify=classify),
        "env": [
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [
            {"name": "grpc", "containerPort": PICKER_GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": PICKER_HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": PICKER_METRICS_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": {**live, "initialDelaySeconds": 5, "periodSeconds": 10},
        "readinessProbe": {**ready, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [{"name": "config", "mountPath": PICKER_CONFIG_DIR, "readOnly": True}],
        # The picker writes nothing to disk (its serving certificate is generated in memory).
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


_ROLLING_ONE_BY_ONE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def _picker_deployment(
    spec: AscendInferenceSpec, owner: Owner, picker: PickerSettings, labels: dict[str, str]
) -> dict:
    name = picker_name(owner.name)
    replicas, elects = spec.routing.picker.replicas, picker_elects(spec)
    # Replicas on other nodes, where the scheduler can: one node's death leaves a picker.
    apart = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": _picker_selector(owner)},
                    },
                }
            ]
        }
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(owner, name, labels),
        "spec": {
            # Electing pickers: Recreate, as upstream, since only the leader is Ready and a rolling update
            # would wait for a new pod that cannot become Ready while the old leader holds the Lease. Pickers
            # that all serve roll one at a time, a new one Ready before an old one goes.
            "replicas": replicas,
            "strategy": {"type": "Recreate"} if elects else _ROLLING_ONE_BY_ONE,
            "selector": {"matchLabels": _picker_selector(owner)},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    # images/picker runs as uid 65532, as upstream's distroless "nonroot"; the picker needs no privilege.
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": PICKER_UID,
                        "runAsGroup": PICKER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "terminationGracePeriodSeconds": 130,
                    **({"affinity": apart} if replicas > 1 else {}),
                    "containers": [_picker_container(owner, picker, elects, classifies(spec))],
                    "volumes": [{"name": "config", "configMap": {"name": name}}],
                },
            },
        },
    }


def _picker_service(owner: Owner, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, picker_name(owner.name), labels),
        "spec": {
            "type": "ClusterIP",
            "selector": _picker_selector(owner),
            "ports": [
                {
                    "name": "grpc-ext-proc",
                    "port": PICKER_GRPC_PORT,
                    "targetPort": PICKER_GRPC_PORT,
                    "protocol": "TCP",
                    "appProtocol": "http2",
                },  # fmt: skip
                {
                    "name": "http-metrics",
                    "port": PICKER_METRICS_PORT,
                    "targetPort": PICKER_METRICS_PORT,
                    "protocol": "TCP",
                },  # fmt: skip
            ],
        },
    }
