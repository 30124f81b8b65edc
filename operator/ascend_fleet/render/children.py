"""Pods per replica and rank, the Services and the PodDisruptionBudget of one AscendInference."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

from ..api import names
from ..api.k8s import parse_quantity
from ..api.settings import NetworkPolicySettings
from ..api.v1alpha1 import AscendInference, AscendInferenceSpec
from ..api.variants import fleet_weights, variant_of, variant_spec
from ..engines import facts_of
from ..layout import Layout, plan, plan_roles, role_spec
from . import podgroup
from .availability import apply_availability
from .engine import EXPORTER_PORT, Rank, command, engine_env, exporter_runs, leader_ports
from .metadata import (
    Owner,
    common_labels,
    headless_service_name,
    metadata,
    pod_group_name,
    pod_name,
    serving_selector,
)
from .network import render_network_policy
from .pdplacement import apply_pair_placement
from .pdsidecar import behind_sidecar, rename_engine_port, sidecar_container, sidecar_runs
from .routing import PickerSettings, render_routing
from .template import ENGINE_CONTAINER, merge_template

# Default host resources per NPU of a pod (engine.resources overrides each key): tokenizers, the HTTP
# server, host-side KV swap and weight loading need CPU and memory beside the NPUs; without requests a pod
# is BestEffort, the first one evicted under node pressure.
CPU_PER_NPU = 4
MEMORY_PER_NPU_GI = 32
ENGINE_UID = (
    1000  # HwHiAiUser, whom the Ascend driver grants its device nodes to; the project's images run as it
)
TERMINATION_GRACE_SECONDS = 60
COMPILE_CACHE_VOLUME = "compile-cache"  # the emptyDir at spec.engine.compilation.cacheDir
DRIVER_MOUNTS = (  # without the Ascend Docker Runtime the engine needs these from the host
    ("ascend-driver", "/usr/local/Ascend/driver", "Directory"),
    ("ascend-dcmi", "/usr/local/dcmi", "Directory"),
    ("npu-smi", "/usr/local/bin/npu-smi", "File"),
)


def revision(spec: AscendInferenceSpec, name: str, layout: Layout | None = None) -> str:
    """Hash of the rendered pod template: equal specs give equal revisions, any pod change a new one.

    Replica 0's pods stand for the template (with variants, the first replica of each variant: one revision
    for the whole fleet, so a change to any variant rolls every replica); the data-parallel size and the
    control-loop fields (autoscaling, rules, disruption) do not change a pod, so they do not change the revision.
    """
    if spec.disaggregation is not None:  # replica 0 of each role stands for the role
        pods = [
            pod
            for role in plan_roles(spec)
            for pod in render_replica(spec, Owner(name, ""), 0, rev="", role=role)
            if pod["kind"] == "Pod"
        ]
    else:
        layout = layout or plan(spec)
        pods = [
            _pod(spec, layout, Owner(name, ""), Rank(replica, rank, layout.pods_per_replica), "")
            for replica in range(max(len(spec.variants), 1))
            for rank in range(layout.pods_per_replica)
        ]
    digest = hashlib.sha256(json.dumps(pods, sort_keys=True).encode()).hexdigest()
    return digest[:10]


def render_replica(
    spec: AscendInferenceSpec,
    owner: Owner,
    replica: int,
    layout: Layout | None = None,
    rev: str | None = None,
    role: str | None = None,
) -> list[dict]:
    """The objects of one replica (a gang): its Volcano PodGroup when Volcano schedules it, then the leader
    pod and the workers by rank (created in this order, so the group exists before its pods).

    ``role`` (prefill or decode) picks one role's instance in a two-role fleet: its layout, names and KV settings.
    """
    if rev is None:
        rev = revision(spec, owner.name, None if role else layout)
    if role is not None:
        spec = role_spec(spec, role)
        layout = plan(spec)
    layout = layout or plan(spec)
    engine_id = pod_name(owner.name, replica, 0, role) if role else None
    pods = [
        _pod(spec, layout, owner, Rank(replica, rank, layout.pods_per_replica, role, engine_id), rev)
        for rank in range(layout.pods_per_replica)
    ]
    group = [replica_pod_group(owner, replica, pods, role)] if uses_volcano(spec) else []
    return group + pods


def uses_volcano(spec: AscendInferenceSpec) -> bool:
    return spec.scheduling.scheduler_name == names.VOLCANO_SCHEDULER


def replica_pod_group(owner: Owner, replica: int, pods: list[dict], role: str | None = None) -> dict:
    """Volcano's PodGroup for one replica's pods: they start together or none does (gang scheduling)."""
    labels = {**common_labels(owner.name), names.LABEL_REPLICA: str(replica)}
    if role is not None:
        labels[names.LABEL_PD_ROLE] = role
    return podgroup.render_pod_group(
        metadata(owner, pod_group_name(owner.name, replica, role), labels), pods, owner.queue
    )


def _pod(fleet: AscendInferenceSpec, layout: Layout, owner: Owner, at: Rank, rev: str) -> dict:
    name = owner.name
    variant = variant_of(fleet.variants, at.replica)
    # Everything below renders the variant's spec: its precision, weights path and served name.
    spec = variant_spec(fleet, variant)
    labels = {
        **common_labels(name),
        names.LABEL_APP_COMPONENT: names.COMPONENT_ENGINE,
        names.LABEL_REPLICA: str(at.replica),
        names.LABEL_RANK: str(at.rank),
        names.LABEL_ROLE: names.ROLE_LEADER if at.leader else names.ROLE_WORKER,
        names.LABEL_REVISION: rev,
    }
    if at.leader:
        labels[names.LABEL_SERVING] = "true"
    if variant is not None:
        labels[names.LABEL_VARIANT] = variant.name
    if at.role is not None:
        labels[names.LABEL_PD_ROLE] = at.role
        labels[names.LABEL_LLMD_ROLE] = at.role
    pod_spec: dict = {
        "hostname": pod_name(name, at.replica, at.rank, at.role),
        "subdomain": headless_service_name(name),
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        # Engines never call the Kubernetes API.
        "automountServiceAccountToken": False,
        # Pod Security "restricted": the device plugin hands NPUs to unprivileged containers.
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": ENGINE_UID,
            "runAsGroup": ENGINE_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": _containers(spec, layout, name, at),
        "volumes": _volumes(spec),
    }
    scheduling = spec.scheduling
    if scheduling.node_selector:
        pod_spec["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        pod_spec["tolerations"] = copy.deepcopy(scheduling.tolerations)
    if scheduling.scheduler_name:
        pod_spec["schedulerName"] = scheduling.scheduler_name
    if scheduling.priority_class_name:
        pod_spec["priorityClassName"] = scheduling.priority_class_name
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(owner, pod_name(name, at.replica, at.rank, at.role), labels),
        "spec": pod_spec,
    }
    if uses_volcano(spec):
        pod["metadata"]["annotations"] = {
            names.ANNOTATION_POD_GROUP: pod_group_name(name, at.replica, at.role)
        }
    # After the template: a template's tolerations or spread constraints replace the rendered lists, and the
    # availability entries must survive that.
    merged = merge_template(pod, spec)
    apply_availability(merged["spec"], spec.availability, name, at.leader)
    if spec.disaggregation is not None:  # both roles in one topology domain, where the KV transfer needs it
        apply_pair_placement(merged["spec"], spec.disaggregation.placement, name)
    return merged


def _containers(spec: AscendInferenceSpec, layout: Layout, name: str, at: Rank) -> list[dict]:
    """The engine container, and in a routed two-role fleet's decode leader llm-d's P/D sidecar in front of it
    (render/pdsidecar.py): the engine then listens on the sidecar's engine port."""
    if not sidecar_runs(spec, at.role):
        return [_container(spec, layout, name, at)]
    engine = _container(behind_sidecar(spec), layout, name, at)
    if not at.leader:
        return [engine]
    rename_engine_port(engine)
    return [engine, sidecar_container(spec)]


def default_resources(spec: AscendInferenceSpec, layout: Layout) -> dict:
    """CPU and memory for one pod, from its NPUs; memory covers the in-memory /dev/shm too.

    The memory limit equals the request, so an engine that outgrows it restarts rather than pressing the
    node; CPU has no limit, since throttling a serving engine costs latency for nothing.
    """
    try:
        shm_gi = float(parse_quantity(spec.engine.shm_size)) / 2**30
    except ValueError:  # a malformed size is the spec check's to report, not the renderer's
        shm_gi = 0.0
    memory = f"{math.ceil(MEMORY_PER_NPU_GI * layout.npus_per_pod + shm_gi)}Gi"
    return {
        "requests": {"cpu": str(CPU_PER_NPU * layout.npus_per_pod), "memory": memory},
        "limits": {"memory": memory},
    }


def _resources(spec: AscendInferenceSpec, layout: Layout) -> dict:
    npus = {spec.hardware.resource_name: str(layout.npus_per_pod)}
    defaults = default_resources(spec, layout)
    user = spec.engine.resources or {}
    resources = {}
    for part in ("requests", "limits"):
        resources[part] = {**defaults[part], **copy.deepcopy(user.get(part) or {}), **npus}
    return resources


def _container(spec: AscendInferenceSpec, layout: Layout, name: str, at: Rank) -> dict:
    resources = _resources(spec, layout)
    container: dict = {
        "name": ENGINE_CONTAINER,
        "image": spec.image(),
        "imagePullPolicy": "IfNotPresent",
        "command": command(spec, layout, at),
        "env": engine_env(spec, layout, name, at),
        "ports": _ports(spec, layout, at),
        "resources": resources,
        "volumeMounts": _mounts(spec),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if at.leader:  # only leaders run the HTTP server; workers hold pipeline stages
        container.update(_probes(spec))
    return container


def _ports(spec: AscendInferenceSpec, layout: Layout, at: Rank) -> list[dict]:
    ports = []
    if at.leader:
        ports.append({"name": "http", "containerPort": spec.engine.port, "protocol": "TCP"})
    if exporter_runs(spec):
        ports.append({"name": "npu-metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"})
    if layout.multi_pod and at.leader:
        ports += leader_ports(spec)
    return ports


def _probes(spec: AscendInferenceSpec) -> dict:
    health = {"httpGet": {"path": facts_of(spec.engine.type).health_path, "port": "http"}}
    period = 10
    return {
        # Model loading takes minutes; the startup probe holds liveness off until then.
        "startupProbe": {
            **health,
            "periodSeconds": period,
            "failureThreshold": max(1, math.ceil(spec.engine.startup_timeout / period)),
        },
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**health, "periodSeconds": 15, "failureThreshold": 4, "timeoutSeconds": 5},
    }


def _volumes(spec: AscendInferenceSpec) -> list[dict]:
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.engine.shm_size}}]
    if spec.model.volume:
        volumes.append({"name": "model", **copy.deepcopy(spec.model.volume)})
    if not spec.hardware.ascend_runtime:
        volumes += [
            {"name": vol, "hostPath": {"path": path, "type": kind}} for vol, path, kind in DRIVER_MOUNTS
        ]
    if compile_cache_dir(spec):
        volumes.append({"name": COMPILE_CACHE_VOLUME, "emptyDir": {}})
    return volumes


def _mounts(spec: AscendInferenceSpec) -> list[dict]:
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.model.volume:
        mounts.append({"name": "model", "mountPath": spec.model.mount_path, "readOnly": True})
    if not spec.hardware.ascend_runtime:
        mounts += [{"name": vol, "mountPath": path, "readOnly": True} for vol, path, _ in DRIVER_MOUNTS]
    cache_dir = compile_cache_dir(spec)
    if cache_dir:
        # A template volumeMount at the same path merges over this one (its volume, a claim, say, replaces it).
        mounts.append({"name": COMPILE_CACHE_VOLUME, "mountPath": cache_dir})
    return mounts


def compile_cache_problems(spec: AscendInferenceSpec) -> list[str]:
    """The compile cache's folder against the driver mounts and a read-only template mount, each a sentence."""
    cache_dir = compile_cache_dir(spec)
    if not cache_dir:
        return []
    problems = []
    if not spec.hardware.ascend_runtime:
        for _, path, _ in DRIVER_MOUNTS:
            if (cache_dir + "/").startswith(path + "/") or (path + "/").startswith(cache_dir + "/"):
                problems.append(
                    f"spec.engine.compilation.cacheDir {cache_dir!r} overlaps {path}, which the operator mounts "
                    "from the host read-only (hardware.ascendRuntime: false); use a folder of its own, e.g. "
                    "/var/cache/compile"
                )
    pod = (spec.template.spec if spec.template else None) or {}
    for container in pod.get("containers") or []:
        if not isinstance(container, dict) or container.get("name") != "engine":
            continue
        for mount in container.get("volumeMounts") or []:
            if isinstance(mount, dict) and mount.get("mountPath") == cache_dir and mount.get("readOnly"):
                problems.append(
                    f"spec.template.spec.containers[engine].volumeMounts: {cache_dir} is "
                    "spec.engine.compilation.cacheDir, where the engine writes its compile cache, and is "
                    "mounted read-only; drop readOnly, or point cacheDir elsewhere"
                )
    return problems


def compile_cache_dir(spec: AscendInferenceSpec) -> str | None:
    """spec.engine.compilation.cacheDir, where the operator mounts the compile cache's volume; or None."""
    compilation = spec.engine.compilation
    return compilation.cache_dir if compilation is not None else None


def render_services(spec: AscendInferenceSpec, owner: Owner, layout: Layout | None = None) -> list[dict]:
    """The serving ClusterIP Service ``<name>`` and the headless ``<name>-pods`` for group DNS."""
    layout = layout or plan(spec)
    name = owner.name
    serving = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, name, common_labels(name)),
        "spec": {
            "type": "ClusterIP",
            "selector": serving_selector(name, spec.disaggregation is not None),
            "ports": [{"name": "http", "port": spec.engine.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    group_ports = [
        {"name": "http", "port": spec.engine.port, "targetPort": spec.engine.port, "protocol": "TCP"}
    ]
    if exporter_runs(spec):
        group_ports.append(
            {"name": "npu-metrics", "port": EXPORTER_PORT, "targetPort": EXPORTER_PORT, "protocol": "TCP"}
        )
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, headless_service_name(name), common_labels(name)),
        "spec": {
            "clusterIP": "None",
            # Ranks must resolve each other while they start, before any of them is Ready.
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_NAME: name},
            "ports": group_ports,
        },
    }
    return [serving, headless]


def render_pdb(spec: AscendInferenceSpec, owner: Owner, layout: Layout | None = None) -> dict:
    """A PodDisruptionBudget over all engine pods, as an integer ``minAvailable``.

    Evicting any pod of a gang takes its whole replica down, so at most ``maxUnavailable`` pods may be out
    at once: ``minAvailable = replicas x pods per replica - maxUnavailable``. (A ``maxUnavailable`` in the PDB
    would be measured against the owner's scale subresource, i.e. replicas rather than pods: 2 replicas of
    4 pods would then allow 7 evictions.) The count follows the replicas, so the reconciler updates it on
    every scale.
    """
    layouts = list(plan_roles(spec).values()) or [layout or plan(spec)]
    total_pods = sum(each.total_pods for each in layouts)
    min_available = max(total_pods - spec.disruption.max_unavailable, 0)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(owner, owner.name, common_labels(owner.name)),
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": {names.LABEL_NAME: owner.name}},
        },
    }


def network_policy(
    spec: AscendInferenceSpec, owner: Owner, settings: NetworkPolicySettings | None = None
) -> dict | None:
    """The fleet's NetworkPolicy (see render/network.py), or None where the operator's settings turn it off."""
    settings = settings or NetworkPolicySettings()
    if not settings.enabled:
        return None
    metrics = [EXPORTER_PORT] if exporter_runs(spec) else []
    assert spec.engine.port is not None  # the spec model fills in the engine's default
    return render_network_policy(owner, spec.engine.port, metrics, settings)


def render_all(
    obj: AscendInference, picker: PickerSettings | None = None, network: NetworkPolicySettings | None = None
) -> list[dict]:
    """Every child object for the spec as it stands: pods of all replicas, Services, PDB, NetworkPolicy,
    routing objects.

    ``picker`` is the operator's endpoint picker setting (its image), ``network`` its NetworkPolicy setting;
    without them, the built-in defaults.
    """
    spec, owner = obj.spec, Owner.of(obj)
    layout = plan(spec)
    rev = revision(spec, owner.name, layout)
    if spec.disaggregation is not None:
        replicas = [
            obj
            for role, role_layout in plan_roles(spec).items()
            for replica in range(role_layout.data)
            for obj in render_replica(spec, owner, replica, rev=rev, role=role)
        ]
    else:
        replicas = [
            obj for replica in range(layout.data) for obj in render_replica(spec, owner, replica, layout, rev)
        ]
    policy = network_policy(spec, owner, network)
    return [
        *render_services(spec, owner, layout),
        render_pdb(spec, owner, layout),
        *([policy] if policy else []),
        *render_routing(spec, owner, picker, fleet_weights(spec, obj.metadata)),
        *replicas,
    ]


def drain_patch(now_rfc3339: str, reason: str) -> dict:
    """Merge patch that takes a leader out of the serving Service and records why and since when.

    The reconciler deletes the replica once ``drainSeconds`` have passed; rollouts, scale-in and
    rule restarts all go through this one path.
    """
    return {
        "metadata": {
            "labels": {names.LABEL_SERVING: "false"},
            "annotations": {
                names.ANNOTATION_DRAIN_STARTED: now_rfc3339,
                names.ANNOTATION_DRAIN_REASON: reason,
            },
        }
    }
