"""Server-side printing: the ``meta.k8s.io/v1 Table`` that ``kubectl get`` asks for (pure).

Custom resources print their CRD's ``additionalPrinterColumns`` the way the API server's table convertor
does (a simple JSONPath per column; ``date`` columns become an age such as ``5m3s``); a few built-in kinds
that people watch during development (pods, nodes, namespaces, events) get kubectl's usual columns, and
every other kind prints NAME and AGE.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MISSING = object()

_NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically."
)
_AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)

_JSONPATH_TOKEN = re.compile(
    r"""
      \.(?P<field>[^.\[\]]+)
    | \[\s*'(?P<single>[^']*)'\s*\]
    | \[\s*"(?P<double>[^"]*)"\s*\]
    | \[\s*(?P<index>-?\d+)\s*\]
    | \[\s*(?P<all>\*)\s*\]
    | \[\s*\?\(\s*@(?P<path>(?:\.[^.=!<>\s)]+)+)\s*(?P<op>==|!=)
        \s*(?P<literal>'[^']*'|"[^"]*"|[^)\s]+)\s*\)\s*\]
    """,
    re.VERBOSE,
)


class JSONPathError(ValueError):
    """A column's JSONPath uses syntax outside the simple subset the API server accepts."""


def jsonpath_values(obj: Any, path: str) -> list[Any]:
    """What a simple JSONPath (``.a.b``, ``[0]``, ``[*]``, ``['k.x']``, ``[?(@.type=="Ready")]``) selects."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1].strip()
    if path and not path.startswith((".", "[")):
        path = "." + path
    values, position = [obj], 0
    while position < len(path):
        match = _JSONPATH_TOKEN.match(path, position)
        if match is None:
            raise JSONPathError(f"unsupported JSONPath {path!r} at {path[position:]!r}")
        values = [child for value in values for child in _step(value, match)]
        position = match.end()
    return values


def _step(value: Any, token: re.Match[str]) -> list[Any]:
    key = token["field"] or token["single"] or token["double"]
    if key is not None:
        return [value[key]] if isinstance(value, Mapping) and key in value else []
    if not isinstance(value, list):
        return []
    if token["index"] is not None:
        index = int(token["index"])
        return [value[index]] if -len(value) <= index < len(value) else []
    if token["all"]:
        return list(value)
    wanted, equal = _literal(token["literal"]), token["op"] == "=="
    return [
        item for item in value if _filter_holds(_first(jsonpath_values(item, token["path"])), wanted, equal)
    ]


def _filter_holds(actual: Any, wanted: Any, equal: bool) -> bool:
    # An item without the filtered field matches neither == nor !=, as in Go's JSONPath.
    return actual is not MISSING and (actual == wanted) == equal


def _literal(text: str) -> Any:
    if text[0] in "'\"":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _first(values: list[Any]) -> Any:
    return values[0] if values else MISSING


def parse_timestamp(value: Any) -> datetime.datetime | None:
    """An RFC 3339 timestamp as an aware datetime, or None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def human_duration(seconds: float) -> str:
    """An age as kubectl prints it (``k8s.io/apimachinery/pkg/util/duration.HumanDuration``)."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if minutes < 10:
        return _compound(minutes, "m", whole % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return _compound(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return _compound(days, "d", hours % 24, "h")
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return _compound(days // 365, "y", days % 365, "d")
    return f"{days // 365}y"


def _compound(major: int, major_unit: str, minor: int, minor_unit: str) -> str:
    return f"{major}{major_unit}{minor}{minor_unit}" if minor else f"{major}{major_unit}"


def age(value: Any, now: datetime.datetime) -> str | None:
    """The age of a timestamp relative to ``now``, as a ``date`` cell shows it."""
    if value is None or value is MISSING:
        return None
    timestamp = parse_timestamp(value)
    if timestamp is None:
        return "<invalid>"
    return human_duration((now - timestamp).total_seconds())


def _cell(column_type: str, value: Any, now: datetime.datetime) -> Any:
    # Mirrors apiextensions' cellForJSONValue: a value of the wrong type prints as <none>.
    if value is MISSING or value is None:
        return None
    if column_type == "string":
        return _print(value)
    if column_type == "date":
        return age(value, now)
    if column_type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if column_type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if column_type == "boolean" and isinstance(value, bool):
        return value
    return None


def _print(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Mapping | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


CellFn = Callable[[Mapping[str, Any], datetime.datetime], Any]


@dataclass(frozen=True)
class Column:
    """One printed column: a JSONPath (as in a CRD) or a function of the object (for built-in kinds)."""

    name: str
    type: str = "string"
    json_path: str | None = None
    cell: CellFn | None = None
    format: str = ""
    description: str = ""
    priority: int = 0

    def definition(self) -> dict[str, Any]:
        """The ``TableColumnDefinition`` of this column."""
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }

    def value(self, obj: Mapping[str, Any], now: datetime.datetime) -> Any:
        """The cell for one object."""
        if self.cell is not None:
            return self.cell(obj, now)
        try:
            raw = _first(jsonpath_values(obj, self.json_path or ""))
        except JSONPathError:
            return None
        return _cell(self.type, raw, now)


NAME = Column(
    "Name", format="name", description=_NAME_DESCRIPTION, cell=lambda obj, now: obj["metadata"]["name"]
)
AGE = Column("Age", type="date", json_path=".metadata.creationTimestamp", description=_AGE_DESCRIPTION)


def crd_columns(printer_columns: Iterable[Mapping[str, Any]] | None) -> tuple[Column, ...]:
    """The columns of a CRD version's ``additionalPrinterColumns`` (NAME and AGE when it declares none)."""
    columns = tuple(
        Column(
            name=column["name"],
            type=column.get("type", "string"),
            json_path=column.get("jsonPath"),
            format=column.get("format", ""),
            description=column.get("description", ""),
            priority=int(column.get("priority", 0)),
        )
        for column in printer_columns or ()
    )
    return columns or (AGE,)


def build_table(
    objects: Iterable[Mapping[str, Any]],
    columns: Iterable[Column],
    *,
    version: str = "v1",
    resource_version: str = "",
    include_object: str = "Metadata",
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io`` Table of ``objects``: NAME, then ``columns``; rows carry the objects' metadata."""
    now = now or datetime.datetime.now(datetime.UTC)
    columns = (NAME, *columns)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [column.definition() for column in columns],
        "rows": [
            {
                "cells": [column.value(obj, now) for column in columns],
                "object": _row_object(obj, include_object),
            }
            for obj in objects
        ],
    }


def _row_object(obj: Mapping[str, Any], include_object: str) -> dict[str, Any] | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return dict(obj)
    return partial_object_metadata(obj)


def partial_object_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ``meta.k8s.io/v1 PartialObjectMetadata`` of an object (what metadata-only clients ask for)."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(obj["metadata"]),
    }


# Built-in kinds -----------------------------------------------------------------------------------


def _pod_ready(pod: Mapping[str, Any], now: datetime.datetime) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or []) or len(statuses)
    return f"{sum(1 for status in statuses if status.get('ready'))}/{total}"


def pod_status_reason(pod: Mapping[str, Any], now: datetime.datetime | None = None) -> str:
    """The STATUS kubectl shows for a pod: a waiting or terminated reason wins over the phase."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            reason = state["terminated"].get("reason") or "Error"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_restarts(pod: Mapping[str, Any], now: datetime.datetime) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(status.get("restartCount") or 0) for status in statuses)


def _node_status(node: Mapping[str, Any], now: datetime.datetime) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return "Ready" if ready.get("status") == "True" else "NotReady"


def _event_object(reference_field: str) -> CellFn:
    def cell(event: Mapping[str, Any], now: datetime.datetime) -> str:
        reference = event.get(reference_field) or {}
        return f"{str(reference.get('kind', '')).lower()}/{reference.get('name', '')}"

    return cell


def _event_last_seen(*paths: str) -> CellFn:
    def cell(event: Mapping[str, Any], now: datetime.datetime) -> str | None:
        for path in paths:
            value = _first(jsonpath_values(event, path))
            if value not in (None, MISSING):
                return age(value, now)
        return None

    return cell


BUILTIN_COLUMNS: dict[tuple[str, str], tuple[Column, ...]] = {
    ("", "pods"): (
        Column("Ready", cell=_pod_ready, description="The number of ready containers out of all containers."),
        Column("Status", cell=pod_status_reason, description="The aggregate state of the containers."),
        Column("Restarts", type="integer", cell=_pod_restarts, description="Container restarts in total."),
        AGE,
        Column("IP", json_path=".status.podIP", priority=1, description="The IP address of the pod."),
        Column("Node", json_path=".spec.nodeName", priority=1, description="The node the pod runs on."),
    ),
    ("", "nodes"): (
        Column("Status", cell=_node_status, description="Whether the node is Ready."),
        Column("Roles", cell=lambda node, now: "<none>", description="The roles of the node."),
        AGE,
        Column("Version", json_path=".status.nodeInfo.kubeletVersion", description="The kubelet version."),
    ),
    ("", "namespaces"): (
        Column("Status", json_path=".status.phase", description="The phase of the namespace."),
        AGE,
    ),
    ("", "events"): (
        Column(
            "Last Seen", cell=_event_last_seen(".lastTimestamp", ".eventTime", ".metadata.creationTimestamp")
        ),
        Column("Type", json_path=".type"),
        Column("Reason", json_path=".reason"),
        Column("Object", cell=_event_object("involvedObject")),
        Column("Message", json_path=".message"),
    ),
    ("events.k8s.io", "events"): (
        Column(
            "Last Seen",
            cell=_event_last_seen(".series.lastObservedTime", ".eventTime", ".metadata.creationTimestamp"),
        ),
        Column("Type", json_path=".type"),
        Column("Reason", json_path=".reason"),
        Column("Object", cell=_event_object("regarding")),
        Column("Message", json_path=".note"),
    ),
}


def builtin_columns(group: str, plural: str) -> tuple[Column, ...]:
    """The columns a built-in kind prints after NAME (AGE for kinds without a specific printer)."""
    return BUILTIN_COLUMNS.get((group, plural), (AGE,))
