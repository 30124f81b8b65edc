"""What the local API serves: built-in resources from kmock's discovery data, custom ones from CRDs (pure).

A :class:`ServedResource` is everything the API server needs to know about one group/version/plural:
its kind, scope, subresources, the version its objects are stored under, how it prints in ``kubectl get``
and, for the ``scale`` subresource, where the replica count and the selector live.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kmock

from ascend_fleet_dev.emulator import tables
from ascend_fleet_dev.emulator.selectors import LabelSelector

CRD_RESOURCE = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACES = kmock.resource("", "v1", "namespaces")

# The verbs every served custom resource supports, as a real API server announces them.
CUSTOM_VERBS = frozenset({"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"})
_VERSION = re.compile(r"^v(?P<major>\d+)(?:(?P<stage>alpha|beta)(?P<minor>\d+))?$")


@dataclass(frozen=True)
class ScaleSpec:
    """Where the ``scale`` subresource reads and writes: ``.spec.replicas``-style simple paths."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None

    def scale_of(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The ``autoscaling/v1 Scale`` view of an object."""
        metadata = obj.get("metadata", {})
        status: dict[str, Any] = {"replicas": _as_int(get_path(obj, self.status_replicas_path))}
        selector = get_path(obj, self.label_selector_path) if self.label_selector_path else None
        if isinstance(selector, Mapping):  # built-in kinds keep a selector object; Scale wants its text
            has_expressions = "matchLabels" in selector or "matchExpressions" in selector
            selector = str(
                LabelSelector.from_object(selector if has_expressions else {"matchLabels": selector})
            )
        if selector:
            status["selector"] = selector
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                key: metadata[key]
                for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if key in metadata
            },
            "spec": {"replicas": _as_int(get_path(obj, self.spec_replicas_path))},
            "status": status,
        }

    def with_replicas(self, obj: Mapping[str, Any], replicas: int) -> dict[str, Any]:
        """A copy of ``obj`` with the desired replica count written at ``specReplicasPath``."""
        return set_path(obj, self.spec_replicas_path, replicas)


BUILTIN_SCALE = ScaleSpec(".spec.replicas", ".status.replicas", ".spec.selector")


def _as_int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _path_parts(path: str) -> list[str]:
    return [part for part in path.strip().lstrip(".").split(".") if part]


def get_path(obj: Mapping[str, Any], path: str) -> Any:
    """The value at a simple dotted path such as ``.spec.parallelism.data``, or None."""
    value: Any = obj
    for part in _path_parts(path):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def set_path(obj: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``value`` at a simple dotted path (intermediate objects created)."""
    result = copy.deepcopy(dict(obj))
    parts = _path_parts(path)
    target = result
    for part in parts[:-1]:
        if not isinstance(target.get(part), dict):
            target[part] = {}
        target = target[part]
    target[parts[-1]] = value
    return result


@dataclass(frozen=True)
class ServedResource:
    """One group/version/plural the API serves."""

    resource: kmock.resource
    kind: str
    namespaced: bool
    storage_version: str
    singular: str = ""
    short_names: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    verbs: frozenset[str] = CUSTOM_VERBS
    subresources: frozenset[str] = frozenset()
    columns: tuple[tables.Column, ...] = (tables.AGE,)
    scale: ScaleSpec | None = None
    custom: bool = False
    list_kind: str = ""
    schema: Mapping[str, Any] | None = None  # a custom resource's openAPIV3Schema, for defaulting

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        group, version = self.resource.group, self.resource.version
        return f"{group}/{version}" if group else str(version)

    @property
    def storage_api_version(self) -> str:
        """The ``apiVersion`` stored objects carry (the CRD's storage version)."""
        group = self.resource.group
        return f"{group}/{self.storage_version}" if group else self.storage_version

    @property
    def list_kind_name(self) -> str:
        """The kind of a list of these objects (``PodList``, or the CRD's ``listKind``)."""
        return self.list_kind or f"{self.kind}List"

    @property
    def storage(self) -> kmock.resource:
        """The resource the objects are stored under (the CRD's storage version; itself for built-ins)."""
        return kmock.resource(self.resource.group, self.storage_version, self.resource.plural)

    @property
    def group_resource(self) -> str:
        """``plural.group`` (``plural`` for the core group), as the API server names it in messages."""
        group, plural = self.resource.group, self.resource.plural
        return f"{plural}.{group}" if group else str(plural)

    def info(self) -> kmock.ResourceInfo:
        """The discovery record kmock keeps for this resource."""
        return kmock.ResourceInfo(
            kind=self.kind,
            namespaced=self.namespaced,
            singular=self.singular or self.kind.lower(),
            verbs=set(self.verbs),
            shortnames=set(self.short_names),
            categories=set(self.categories),
            subresources=set(self.subresources),
        )


def builtin_resource(resource: kmock.resource, info: kmock.ResourceInfo) -> ServedResource:
    """A built-in resource from its kmock discovery record."""
    subresources = frozenset(info.subresources)
    return ServedResource(
        resource=resource,
        kind=info.kind or str(resource.plural).capitalize(),
        namespaced=bool(info.namespaced),
        storage_version=str(resource.version),
        singular=info.singular or "",
        short_names=frozenset(info.shortnames),
        categories=frozenset(info.categories),
        verbs=frozenset(info.verbs),
        subresources=subresources,
        columns=tables.builtin_columns(str(resource.group), str(resource.plural)),
        scale=BUILTIN_SCALE if "scale" in subresources else None,
    )


def crd_problems(crd: Mapping[str, Any]) -> list[str]:
    """What makes a CustomResourceDefinition invalid, in the API server's words (empty if it is fine)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    problems = [
        f"spec.{path}: Required value"
        for path in ("group", "names.plural", "names.kind")
        if not get_path(spec, path)
    ]
    if problems:
        return problems
    expected = f"{names['plural']}.{spec['group']}"
    if crd.get("metadata", {}).get("name") != expected:
        problems.append(
            f'metadata.name: Invalid value: must be spec.names.plural+"."+spec.group: {expected!r}'
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        problems.append('spec.scope: Unsupported value: supported values: "Cluster", "Namespaced"')
    versions = spec.get("versions") or []
    if not versions or sum(1 for version in versions if version.get("storage")) != 1:
        problems.append(
            "spec.versions: Invalid value: must have exactly one version marked as storage version"
        )
    return problems


def served_resources(crd: Mapping[str, Any]) -> list[ServedResource]:
    """The resources a (valid) CRD serves: one per version with ``served: true``."""
    spec = crd["spec"]
    names = spec["names"]
    storage_version = next(version["name"] for version in spec["versions"] if version.get("storage"))
    served = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        served.append(
            ServedResource(
                resource=kmock.resource(spec["group"], version["name"], names["plural"]),
                kind=names["kind"],
                namespaced=spec.get("scope") == "Namespaced",
                storage_version=storage_version,
                singular=names.get("singular") or names["kind"].lower(),
                short_names=frozenset(names.get("shortNames") or ()),
                categories=frozenset(names.get("categories") or ()),
                subresources=frozenset(key for key in ("status", "scale") if key in subresources),
                columns=tables.crd_columns(version.get("additionalPrinterColumns")),
                scale=ScaleSpec(
                    scale["specReplicasPath"],
                    scale["statusReplicasPath"],
                    scale.get("labelSelectorPath"),
                )
                if scale
                else None,
                custom=True,
                list_kind=names.get("listKind") or f"{names['kind']}List",
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            )
        )
    return served


def established_status(crd: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The status a real API server gives an accepted CRD (``NamesAccepted`` and ``Established``)."""
    spec = crd["spec"]
    storage_version = next(version["name"] for version in spec["versions"] if version.get("storage"))
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    return {
        "acceptedNames": names,
        "storedVersions": [storage_version],
        "conditions": [
            _condition("NamesAccepted", "NoConflicts", "no conflicts found", now),
            _condition("Established", "InitialNamesAccepted", "the initial names have been accepted", now),
        ],
    }


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key for Kubernetes versions, best first: GA > beta > alpha, then the higher numbers."""
    match = _VERSION.match(version)
    if match is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[match["stage"]]
    return (stage, -int(match["major"]), -int(match["minor"] or 0), version)


def preferred_version(versions: Iterable[str]) -> str:
    """The version discovery announces as preferred for a group."""
    return sorted(versions, key=version_priority)[0]


def apply_schema_defaults(schema: Mapping[str, Any] | None, value: Any) -> Any:
    """Fill in the structural schema's ``default`` values, as the API server does on every write.

    Defaults apply to fields missing from objects that are present; an absent parent stays absent
    (unless it has a default of its own), exactly the API server's rule.
    """
    if not schema:
        return value
    if isinstance(value, dict):
        for key, child in (schema.get("properties") or {}).items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                value[key] = apply_schema_defaults(child, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_schema_defaults(schema["items"], item) for item in value]
    return value
