"""Kubernetes sub-objects a spec passes into its pods, checked as the API server checks them.

A value the API server would refuse in a pod (a bad quantity, resource name, toleration, env entry or
volume source) is an InvalidSpec naming the spec field, rather than a pod create that fails on every
pass. The rules mirror the server's validation of the fields in question (core/v1 Pod validation, v1.34);
the CRD states what OpenAPI can (patterns, enums), and tests compare these checks with the server's own
verdict on real pods.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from kubernetes.utils.quantity import parse_quantity as kubernetes_quantity
from pydantic import AfterValidator, WithJsonSchema

from .bounds import MAX_QUANTITY_LENGTH, MAX_RESOURCES

# resource.Quantity's grammar: a signed decimal number, then a binary (Ki..Ei), decimal (n, u, m, k, M..E)
# or exponent suffix.
_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY_PATTERN = rf"^[+-]?{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?{_NUMBER}))?$"
SIZE_PATTERN = rf"^{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?{_NUMBER}))?$"  # no sign: sizes are >= 0
_QUANTITY = re.compile(QUANTITY_PATTERN)


def parse_quantity(text: object) -> Decimal:
    """The value of a quantity (``16Gi``, ``500m``, ``1e3``, ``2``); ValueError if the server would refuse it.

    The grammar is checked here (the Kubernetes client's parser also takes forms the server refuses, such
    as ``1K`` or ``NaN``); the arithmetic is the client's.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"{text!r} is not a quantity; write e.g. 16Gi, 500m or 2")
    text = str(text)
    if not _QUANTITY.match(text):
        raise ValueError(f"{text!r} is not a quantity; write e.g. 16Gi, 500m or 2")
    return kubernetes_quantity(text)


def check_size(value: str) -> str:
    """A non-negative quantity such as ``16Gi`` (an emptyDir's sizeLimit)."""
    if parse_quantity(value) < 0:
        raise ValueError(f"{value!r} is negative; a size is >= 0")
    return value


Size = Annotated[
    str,
    AfterValidator(check_size),
    WithJsonSchema({"type": "string", "pattern": SIZE_PATTERN, "maxLength": 64}),
]


# ----- names -----

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def qualified_name_problem(name: str) -> str | None:
    """Why ``name`` is not a Kubernetes qualified name (``[prefix/]name``), or None."""
    prefix, _, local = name.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"{name!r}: the prefix before '/' must be a DNS subdomain (e.g. example.com)"
    if not local or len(local) > 63 or not _NAME_PART.match(local):
        return (
            f"{name!r}: the name must be at most 63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


_STANDARD_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}


def _resource_name_problem(name: str) -> str | None:
    problem = qualified_name_problem(name)
    if problem:
        return problem
    if "/" not in name and name not in _STANDARD_CONTAINER_RESOURCES and not name.startswith("hugepages-"):
        return (
            f"{name!r} is not a container resource: use cpu, memory, ephemeral-storage, hugepages-<size> or a "
            "device plugin's <domain>/<name>"
        )
    if "/" in name and name.split("/")[0].endswith("kubernetes.io") and not name.startswith("hugepages"):
        return f"{name!r}: resources under kubernetes.io are reserved for Kubernetes"
    return None


# ----- resources -----


def check_resources(value: dict[str, Any]) -> dict[str, Any]:
    """``engine.resources``: requests and limits of valid names and quantities, requests <= limits."""
    extra = sorted(set(value) - {"requests", "limits"})
    if extra:
        raise ValueError(f"unknown field(s) {', '.join(extra)}; resources take requests and limits")
    parsed: dict[str, dict[str, Decimal]] = {}
    for part in ("requests", "limits"):
        table = value.get(part) or {}
        if not isinstance(table, dict):
            raise ValueError(f"{part} must be a map of resource name to quantity, e.g. {{memory: 64Gi}}")
        if len(table) > MAX_RESOURCES:
            raise ValueError(f"{part}: {len(table)} resources, over the {MAX_RESOURCES} the CRD allows")
        parsed[part] = {}
        for name, quantity in table.items():
            if len(str(quantity)) > MAX_QUANTITY_LENGTH:
                raise ValueError(
                    f"{part}.{name}: {len(str(quantity))} characters, over the {MAX_QUANTITY_LENGTH} a quantity "
                    "may have; write it with a suffix, e.g. 64Gi"
                )
            problem = _resource_name_problem(str(name))
            if problem:
                raise ValueError(f"{part}: {problem}")
            try:
                parsed[part][name] = parse_quantity(quantity)
            except ValueError as error:
                raise ValueError(f"{part}.{name}: {error}") from None
            if parsed[part][name] < 0:
                raise ValueError(f"{part}.{name}: {quantity!r} is negative; a resource quantity is >= 0")
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is not None and request > limit:
            raise ValueError(
                f"requests.{name} ({value['requests'][name]}) is above limits.{name} ({value['limits'][name]}); "
                "a request must be <= its limit"
            )
    return value


_QUANTITY_NODE = {
    "x-kubernetes-int-or-string": True,
    "pattern": QUANTITY_PATTERN,
    "maxLength": MAX_QUANTITY_LENGTH,
}
RESOURCES_SCHEMA = {
    "type": "object",
    "description": "CPU/memory requests and limits (the NPU resource is set from the layout).",
    "properties": {
        "requests": {
            "type": "object",
            "additionalProperties": _QUANTITY_NODE,
            "maxProperties": MAX_RESOURCES,
            "description": "What the scheduler reserves, by resource (cpu, memory).",
        },
        "limits": {
            "type": "object",
            "additionalProperties": _QUANTITY_NODE,
            "maxProperties": MAX_RESOURCES,
            "description": "The most the engine may use, by resource (cpu, memory).",
        },
    },
}
ResourceRequirements = Annotated[
    dict[str, Any], AfterValidator(check_resources), WithJsonSchema(RESOURCES_SCHEMA)
]


# ----- tolerations -----

TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_FIELDS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def check_toleration(value: dict[str, Any]) -> dict[str, Any]:
    """A toleration as the API server validates it."""
    extra = sorted(set(value) - _TOLERATION_FIELDS)
    if extra:
        raise ValueError(
            f"unknown field(s) {', '.join(extra)}; a toleration has {', '.join(sorted(_TOLERATION_FIELDS))}"
        )
    key, operator = value.get("key") or "", value.get("operator") or "Equal"
    if operator not in TOLERATION_OPERATORS:
        raise ValueError(f"operator {operator!r} must be Exists or Equal")
    if key:
        problem = qualified_name_problem(str(key))
        if problem:
            raise ValueError(f"key {problem}")
    elif operator != "Exists":
        raise ValueError("operator must be Exists when key is empty (it then matches every taint)")
    tol_value = value.get("value") or ""
    if operator == "Exists" and tol_value:
        raise ValueError("value must be empty when operator is Exists")
    if operator == "Equal" and (not _LABEL_VALUE.match(str(tol_value)) or len(str(tol_value)) > 63):
        raise ValueError(
            f"value {tol_value!r} must be a label value (at most 63 letters, digits, '-', '_', '.')"
        )
    effect = value.get("effect") or ""
    if effect and effect not in TAINT_EFFECTS:
        raise ValueError(f"effect {effect!r} must be one of {', '.join(TAINT_EFFECTS)}")
    if value.get("tolerationSeconds") is not None:
        if effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        if isinstance(value["tolerationSeconds"], bool) or not isinstance(value["tolerationSeconds"], int):
            raise ValueError("tolerationSeconds must be a whole number of seconds")
    return value


TOLERATION_SCHEMA = {
    "type": "object",
    "description": "A toleration, as in a pod spec.",
    "properties": {
        "key": {"type": "string", "maxLength": 317, "description": "Taint key; empty with Exists: every taint."},
        "operator": {"type": "string", "enum": list(TOLERATION_OPERATORS), "description": "Exists or Equal."},
        "value": {"type": "string", "maxLength": 63, "description": "Taint value (Equal only)."},
        "effect": {"type": "string", "enum": list(TAINT_EFFECTS), "description": "Taint effect; empty: all."},
        "tolerationSeconds": {"type": "integer", "description": "How long a NoExecute taint is tolerated."},
    },
    "x-kubernetes-validations": [
        {"rule": "has(self.key) && self.key != '' || has(self.operator) && self.operator == 'Exists'",
         "message": "operator must be Exists when key is empty (it then matches every taint)"},
        {"rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
         "message": "value must be empty when operator is Exists"},
        {"rule": "!has(self.tolerationSeconds) || has(self.effect) && self.effect == 'NoExecute'",
         "message": "tolerationSeconds needs effect NoExecute"},
    ],
}  # fmt: skip
Toleration = Annotated[dict[str, Any], AfterValidator(check_toleration), WithJsonSchema(TOLERATION_SCHEMA)]


# ----- env -----

# Field paths a container's env may read through the downward API (fieldRef).
ENV_FIELD_PATHS = (
    "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
    "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
)  # fmt: skip
_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
_ENV_NAME = re.compile(r"^[ -<>-~]+$")  # printable ASCII but '=' (the server's relaxed env-name rule)


def env_name_problem(name: str) -> str | None:
    if not _ENV_NAME.match(name):
        return f"env name {name!r} must be printable ASCII characters other than '='"
    return None


def check_value_from(value: dict[str, Any]) -> dict[str, Any]:
    """An env entry's valueFrom: exactly one source, with the fields it needs."""
    sources = [s for s in _ENV_SOURCES if s in value]
    extra = sorted(set(value) - set(_ENV_SOURCES))
    if extra:
        raise ValueError(
            f"unknown field(s) {', '.join(extra)}; valueFrom takes one of {', '.join(_ENV_SOURCES)}"
        )
    if len(sources) != 1:
        raise ValueError(f"valueFrom needs exactly one of {', '.join(_ENV_SOURCES)}")
    (source,) = sources
    ref = value[source] or {}
    if source == "fieldRef":
        path = ref.get("fieldPath", "")
        if path not in ENV_FIELD_PATHS and not re.match(r"^metadata\.(labels|annotations)\['[^']+'\]$", path):
            raise ValueError(
                f"fieldRef.fieldPath {path!r} is not one a container can read; use one of {', '.join(ENV_FIELD_PATHS)}"
                ", metadata.labels['<key>'] or metadata.annotations['<key>']"
            )
    elif source == "resourceFieldRef":
        if not ref.get("resource"):
            raise ValueError("resourceFieldRef.resource is required (e.g. limits.memory)")
    elif not ref.get("key"):
        raise ValueError(f"{source}.key is required")
    return value


VALUE_FROM_SCHEMA = {
    "type": "object",
    "description": "A Kubernetes EnvVarSource: fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef.",
    "x-kubernetes-preserve-unknown-fields": True,
}
EnvVarSource = Annotated[dict[str, Any], AfterValidator(check_value_from), WithJsonSchema(VALUE_FROM_SCHEMA)]


# ----- volumes -----

# VolumeSource's fields in core/v1 (v1.34): a volume names exactly one of them.
VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
)  # fmt: skip
# Pod Security "restricted" admits only these sources (pod-security-admission's restrictedVolumes check);
# model.volume takes them, and hostPath where the operator configuration allows it.
RESTRICTED_VOLUMES = (
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim", "projected",
    "secret",
)  # fmt: skip
MODEL_VOLUMES = (*RESTRICTED_VOLUMES, "hostPath")
# The fields each common source cannot do without.
_REQUIRED = {
    "persistentVolumeClaim": ("claimName",), "hostPath": ("path",), "nfs": ("server", "path"), "csi": ("driver",),
    "configMap": ("name",), "secret": ("secretName",), "image": ("reference",),
}  # fmt: skip
HOST_PATH_TYPES = (
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
)


def check_volume(value: dict[str, Any]) -> dict[str, Any]:
    """``model.volume``: exactly one Kubernetes volume source, with the fields it needs."""
    unknown = sorted(set(value) - set(VOLUME_SOURCES))
    if unknown:
        raise ValueError(
            f"unknown volume source(s) {', '.join(unknown)}; use one of persistentVolumeClaim, csi, image, ... "
            "(a Kubernetes volume source, without name)"
        )
    refused = sorted(set(value) - set(MODEL_VOLUMES))
    if refused:
        raise ValueError(
            f'a {refused[0]} volume is refused by Pod Security "restricted"; use a persistentVolumeClaim '
            "(bound to any storage, NFS included), csi, image or another of "
            f"{', '.join(RESTRICTED_VOLUMES)}"
        )
    if len(value) != 1:
        raise ValueError(f"a volume names exactly one source; this one names {len(value)}")
    ((source, fields),) = value.items()
    fields = fields or {}
    if not isinstance(fields, dict):
        raise ValueError(f"{source} must be an object")
    missing = [f for f in _REQUIRED.get(source, ()) if not fields.get(f)]
    if missing:
        raise ValueError(f"{source}.{missing[0]} is required")
    if source == "hostPath" and fields.get("type", "") not in HOST_PATH_TYPES:
        raise ValueError(
            f"hostPath.type {fields['type']!r} must be one of {', '.join(t for t in HOST_PATH_TYPES if t)}"
        )
    if source == "hostPath" and not str(fields["path"]).startswith("/"):
        raise ValueError(f"{source}.path {fields['path']!r} must be absolute")
    return value


# The sources are named properties, so kubectl's strict field validation refuses any other source (gitRepo,
# nfs, ...) at apply; a client that does not validate gets it pruned, and minProperties refuses the rest.
VOLUME_SCHEMA = {
    "type": "object",
    "description": "A Kubernetes volume source holding the weights (persistentVolumeClaim, csi, image, ... as Pod "
    'Security "restricted" admits; hostPath only where the operator configuration allows it), mounted '
    "read-only at mountPath.",
    "properties": {
        source: {
            "type": "object",
            "description": f"A {source} volume source, as in a Pod's spec.volumes[].",
            "x-kubernetes-preserve-unknown-fields": True,
        }
        for source in MODEL_VOLUMES
    },
    "maxProperties": 1,
    "minProperties": 1,
}
VolumeSource = Annotated[dict[str, Any], AfterValidator(check_volume), WithJsonSchema(VOLUME_SCHEMA)]
