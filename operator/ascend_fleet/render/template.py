"""``spec.template``: a partial PodTemplateSpec merged into every engine pod, as a strategic merge patch.

Kubernetes' strategic-merge rules for the fields a template may set: maps merge key by key; lists with a
merge key (containers, initContainers and volumes by ``name``, env by ``name``, volumeMounts by
``mountPath``, ports by ``containerPort``, imagePullSecrets by ``name``) merge entry by entry; every other
list (tolerations, topologySpreadConstraints, ...) replaces the rendered one. What the operator owns is
refused with a sentence instead of being overridden: the labels it selects on, the engine's command, args,
image and NPU resource, the pod's identity (hostname, subdomain, restartPolicy) and the volumes it mounts.
"""

from __future__ import annotations

import copy
from typing import Any

from ..api import names
from ..api.v1alpha1 import AscendInferenceSpec
from .restricted import restricted_problems

ENGINE_CONTAINER = "engine"  # the engine pod's serving container, where a template's engine fields merge

# Pod spec fields a template may set (the rest belong to the operator or are node-level powers such as
# hostNetwork and hostPID, which an inference pod does not need).
POD_FIELDS = frozenset(
    {
        "affinity",
        "tolerations",
        "nodeSelector",
        "imagePullSecrets",
        "serviceAccountName",
        "priorityClassName",
        "securityContext",
        "volumes",
        "initContainers",
        "containers",
        "automountServiceAccountToken",
        "topologySpreadConstraints",
        "dnsConfig",
        "dnsPolicy",
        "runtimeClassName",
        "schedulerName",
        "terminationGracePeriodSeconds",
        "enableServiceLinks",
    }
)
ENGINE_FIELDS = frozenset({"name", "env", "volumeMounts", "resources"})
OPERATOR_VOLUMES = frozenset({"dshm", "model", "ascend-driver", "ascend-dcmi", "npu-smi", "compile-cache"})

# Strategic-merge keys of the lists a template may reach.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def template_problems(spec: AscendInferenceSpec) -> list[str]:
    """What a template may not set, each a sentence saying what fits instead."""
    template = spec.template
    if template is None:
        return []
    problems = []
    for key in template.metadata.labels if template.metadata else {}:
        if key.startswith(f"{names.GROUP}/") or key in (
            names.LABEL_APP_NAME,
            names.LABEL_APP_INSTANCE,
            names.LABEL_APP_MANAGED_BY,
            names.LABEL_APP_COMPONENT,
        ):
            problems.append(
                f"spec.template.metadata.labels: {key!r} is a label the operator sets and selects on; "
                "use a label key of your own"
            )
    pod = template.spec or {}
    for key in sorted(set(pod) - POD_FIELDS):
        problems.append(
            f"spec.template.spec.{key}: not settable through the template (the operator owns it, or an "
            f"inference pod has no use for it); a template may set {', '.join(sorted(POD_FIELDS))}"
        )
    for index, volume in enumerate(_list(pod, "volumes")):
        if isinstance(volume, dict) and volume.get("name") in OPERATOR_VOLUMES:
            problems.append(
                f"spec.template.spec.volumes[{index}]: the name {volume['name']!r} is the operator's volume; "
                "give yours another name"
            )
    for list_name in ("containers", "initContainers", "volumes", "imagePullSecrets"):
        for index, item in enumerate(_list(pod, list_name)):
            if not isinstance(item, dict) or not item.get("name"):
                problems.append(f"spec.template.spec.{list_name}[{index}]: every entry needs a name")
    problems += _env_problems(pod)
    for index, container in enumerate(_list(pod, "containers")):
        if not isinstance(container, dict) or container.get("name") != ENGINE_CONTAINER:
            continue
        for key in sorted(set(container) - ENGINE_FIELDS):
            problems.append(
                f"spec.template.spec.containers[{index}] (engine).{key}: the operator sets the engine's {key}; "
                "the engine container takes env, volumeMounts and resources from the template (engine "
                "arguments go in spec.engine.args, the image in spec.engine.image)"
            )
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            if spec.hardware.resource_name in (resources.get(part) or {}):
                problems.append(
                    f"spec.template.spec.containers[{index}] (engine).resources.{part}: "
                    f"{spec.hardware.resource_name} comes from spec.parallelism; set the layout instead"
                )
    return problems


def pod_security_problems(spec: AscendInferenceSpec, pods: list[dict]) -> list[str]:
    """Pod Security "restricted" on the merged pods, each problem once, named by the field that set it."""
    template = (spec.template.spec if spec.template else None) or {}
    indices = {
        (list_name, item.get("name")): index
        for list_name in ("containers", "initContainers", "volumes")
        for index, item in enumerate(_list(template, list_name))
        if isinstance(item, dict)
    }

    def where(list_name: str, _index: int, name: str) -> str:
        if list_name == "containers" and name == ENGINE_CONTAINER:
            return "the engine container (spec.template.spec.containers[engine])"
        at = indices.get((list_name, name))
        return f"spec.template.spec.{list_name}[{at}]" if at is not None else f"spec.{list_name}[{name}]"

    def volume_where(name: str) -> str:
        if name == "model":
            return "spec.model.volume"
        at = indices.get(("volumes", name))
        return f"spec.template.spec.volumes[{at}]" if at is not None else f"volume {name}"

    # The platform's own hostPath volumes: the driver mounts, a hostPath model (checked by the hostPath setting).
    exempt = {"ascend-driver", "ascend-dcmi", "npu-smi"}
    if spec.model.volume and "hostPath" in spec.model.volume:
        exempt.add("model")
    annotations = (
        dict(spec.template.metadata.annotations or {}) if spec.template and spec.template.metadata else {}
    )
    problems: list[str] = []
    for pod in pods:
        for problem in restricted_problems(
            pod["spec"], annotations, where, volume_where, frozenset(exempt), "spec.template.spec"
        ):
            if problem not in problems:
                problems.append(problem)
    return problems


def _env_problems(pod: dict) -> list[str]:
    """Reserved variables in any container's env: the NPU device variables everywhere (a sidecar would reach
    NPUs the pod was never given), the operator's own in the engine container."""
    problems = []
    for list_name in ("containers", "initContainers"):
        for index, container in enumerate(_list(pod, list_name)):
            if not isinstance(container, dict):
                continue
            engine = list_name == "containers" and container.get("name") == ENGINE_CONTAINER
            for variable in container.get("env") or []:
                name = variable.get("name") if isinstance(variable, dict) else None
                problem = names.reserved_env_problem(name, engine=engine) if isinstance(name, str) else None
                if problem:
                    problems.append(f"spec.template.spec.{list_name}[{index}].env: {problem}")
    return problems


def merge_template(pod: dict, spec: AscendInferenceSpec) -> dict:
    """The pod with ``spec.template`` merged in (strategic-merge semantics); the pod itself is not changed."""
    template = spec.template
    if template is None:
        return pod
    merged = copy.deepcopy(pod)
    if template.metadata:
        meta = merged["metadata"]
        if template.metadata.annotations:
            meta["annotations"] = {**meta.get("annotations", {}), **template.metadata.annotations}
        if template.metadata.labels:
            meta["labels"] = {**template.metadata.labels, **meta["labels"]}
    merged["spec"] = _merge(merged["spec"], copy.deepcopy(template.spec or {}))
    return merged


def _merge(base: Any, patch: Any, key: str | None = None) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for name, value in patch.items():
            out[name] = _merge(base[name], value, name) if name in base else value
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        items = list(base)
        position = {item.get(merge_key): i for i, item in enumerate(items) if isinstance(item, dict)}
        for item in patch:
            at = position.get(item.get(merge_key)) if isinstance(item, dict) else None
            if at is None:
                items.append(item)
            else:
                items[at] = _merge(items[at], item)
        return items
    return patch


def _list(pod: dict, key: str) -> list:
    value = pod.get(key)
    return value if isinstance(value, list) else []


KUBERNETES_SCHEMA_VERSION = "1.33"


def schema_problems(pods: list[dict]) -> list[str]:
    """The merged pods checked against Kubernetes' own Pod schema, where kubernetes-validate is installed.

    The API server checks every pod again on create; this check lets ``ascend-fleet validate`` and the
    ``InvalidSpec`` condition name a template mistake (a misspelt field, a string where a list belongs)
    before any pod is tried.
    """
    try:
        import kubernetes_validate
    except ImportError:
        return []
    problems = []
    for pod in pods[:1]:  # the leader stands for all: the template is the same in every pod
        try:
            kubernetes_validate.validate(pod, KUBERNETES_SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            problems.append(
                f"spec.template: the merged pod is not a valid Pod at {where or 'the top'}: {error.message}"
            )
        except kubernetes_validate.SchemaNotFoundError:
            return []
    return problems
