"""The CustomResourceDefinition, generated from the pydantic models (one source of truth).

Pydantic's JSON Schema is turned into a Kubernetes *structural* schema: references inlined,
``Optional`` unions collapsed, ``const`` as ``enum``, JSON-Schema-2020 exclusive bounds as
OpenAPI v3.0 booleans, defaults moved into descriptions (pydantic fills them in; the API server
stores what the user wrote, which keeps GitOps diffs clean).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from . import names
from .checks import NODE, root_validations, spec_validations
from .disaggregation import disaggregation_validations, root_validation
from .units import DURATION_PATTERN, format_duration
from .v1alpha1 import AscendInferenceSpec, AscendInferenceStatus

_DROP = {"title", "default", "additionalProperties", "$defs"}


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One node of pydantic's JSON schema as a structural OpenAPI v3 node."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _structural(merged, defs)
    branches = [b for b in schema.get("anyOf", []) if b.get("type") != "null"]
    if "anyOf" in schema and len(branches) == 1:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return _structural({**branches[0], **rest}, defs)
    out: dict[str, Any] = {}
    if schema.pop("x-crd-default", False) and "default" in schema:
        out["default"] = schema["default"]
    if schema.pop("x-crd-default-object", False):
        out["default"] = {}  # so the fields' own defaults apply when the whole object is left out
    for key, value in schema.items():
        if key in _DROP:
            continue
        if key == "properties":
            out["properties"] = {k: _structural(v, defs) for k, v in value.items()}
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(schema["additionalProperties"], defs)
    if "properties" in out:
        out["type"] = "object"
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "default" in schema and _is_scalar(schema["default"]) and "description" in out:
        default = schema["default"]
        if out.get("pattern") == DURATION_PATTERN and not isinstance(default, str):
            default = format_duration(default)
        out["description"] = f"{out['description'].rstrip('.')}. Default: {json.dumps(default)}."
    return out


def _is_scalar(value: object) -> bool:
    return isinstance(value, str | int | float | bool)


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model's wire schema (camelCase) as a structural OpenAPI v3 schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def openapi_schema() -> dict[str, Any]:
    """The whole object's openAPIV3Schema."""
    spec = model_schema(AscendInferenceSpec)
    spec["description"] = "What to serve and how: model, engine, parallel layout, memory pools and rules."
    spec.setdefault("x-kubernetes-validations", []).extend(spec_validations())
    spec["x-kubernetes-validations"].extend(disaggregation_validations(NODE))
    status = model_schema(AscendInferenceStatus)
    status["description"] = "What the operator observed and did."
    return {
        "type": "object",
        "description": "A fleet of LLM inference engines (vllm-ascend or SGLang) on Ascend NPUs.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": f"{names.API_VERSION}."},
            "kind": {"type": "string", "description": f"{names.KIND}."},
            # The API server refuses anything but name and generateName here, a description included.
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [*root_validations(), root_validation()],
    }


PRINTER_COLUMNS = [
    {"name": "Engine", "type": "string", "jsonPath": ".spec.engine.type"},
    {"name": "TP", "type": "integer", "jsonPath": ".spec.parallelism.tensor"},
    {"name": "PP", "type": "integer", "jsonPath": ".spec.parallelism.pipeline"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.parallelism.data"},
    {"name": "Ready-Replicas", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "NPUs", "type": "integer", "jsonPath": ".status.layout.totalNpus"},
    # The Ready condition, so an InvalidSpec or a failing replica shows in `kubectl get ainf`.
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
    {
        "name": "Message",
        "type": "string",
        "priority": 1,  # `kubectl get -o wide` only: the sentences are long
        "jsonPath": '.status.conditions[?(@.type=="Ready")].message',
    },
    # Two-role fleets: whether the decode engines' own counters show KV arriving by transfer.
    {
        "name": "KV-Transfer",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="KVTransfer")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object for AscendInference."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": names.CRD_NAME},
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": names.KIND,
                "listKind": f"{names.KIND}List",
                "plural": names.PLURAL,
                "singular": names.SINGULAR,
                "shortNames": [names.SHORT_NAME],
                "categories": ["ascend-fleet"],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.parallelism.data",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML checked in under crds/."""
    import yaml

    header = "# Generated by `ascend-fleet crd` from operator/ascend_fleet/api; do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)
