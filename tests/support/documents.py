"""One fluent builder for the AscendInference documents tests send, validate or render.

    inference("qwen").engine("sglang").parallelism(tensor=4, pipeline=2, data=2).rule(...).build()

Every method sets one part of the document and returns the builder; ``build()`` returns a fresh dict,
so one builder can be built several times. Field names inside sections are the API's (camelCase).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from ascend_fleet.api import names
from tests.support.paths import ROOT

# What a template's sidecar or init container sets for Pod Security "restricted" (the operator's pod context
# gives runAsNonRoot and the seccomp profile).
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


class InferenceDocument:
    """An AscendInference under construction: ``metadata``, ``spec`` and, for status-reading code, ``status``."""

    def __init__(self, doc: dict):
        self._doc = doc

    @property
    def _spec(self) -> dict:
        return self._doc["spec"]

    def namespace(self, namespace: str) -> InferenceDocument:
        """Set ``metadata.namespace``."""
        self._doc["metadata"]["namespace"] = namespace
        return self

    def uid(self, uid: str) -> InferenceDocument:
        """Set ``metadata.uid`` (as the API server would, for owner references)."""
        self._doc["metadata"]["uid"] = uid
        return self

    def generation(self, generation: int) -> InferenceDocument:
        """Set ``metadata.generation`` (as the API server would on each spec change)."""
        self._doc["metadata"]["generation"] = generation
        return self

    def model(self, name: str | None = None, path: str | None = None, **fields: Any) -> InferenceDocument:
        """Merge into ``spec.model``: a new name (its path ``/models/<name>`` unless given) and other fields."""
        model = self._spec.setdefault("model", {})
        if name is not None:
            model["name"], model["path"] = name, path or f"/models/{name}"
        elif path is not None:
            model["path"] = path
        model.update(fields)
        return self

    def engine(self, type_: str, **fields: Any) -> InferenceDocument:
        """Set ``spec.engine`` to an engine ``type`` with further fields (``image``, ...)."""
        self._spec["engine"] = {"type": type_, **fields}
        return self

    def parallelism(
        self, tensor: int | None = None, pipeline: int | None = None, data: int | None = None, **fields: Any
    ) -> InferenceDocument:
        """Set ``spec.parallelism`` to the degrees given (the others stay unset, so their defaults apply)."""
        degrees = {"tensor": tensor, "pipeline": pipeline, "data": data}
        self._spec["parallelism"] = {k: v for k, v in degrees.items() if v is not None} | fields
        return self

    def rule(
        self, metric: str, threshold: Any, action: str, window: str = "5m", **fields: Any
    ) -> InferenceDocument:
        """Append a rule: ``action`` when ``metric`` crosses ``threshold`` for ``window``."""
        rule = {"metric": metric, "threshold": threshold, "for": window, "action": action, **fields}
        self._spec.setdefault("rules", []).append(rule)
        return self

    def rules(self, rules: list[dict]) -> InferenceDocument:
        """Set ``spec.rules`` to these rules (``[]`` turns the defaults off)."""
        self._spec["rules"] = copy.deepcopy(rules)
        return self

    def routing(self, mode: str, **fields: Any) -> InferenceDocument:
        """Set ``spec.routing``: a mode (``service``, ``inferencePool``) with its fields (``classes``, ...)."""
        self._spec["routing"] = {"mode": mode, **fields}
        return self

    def section(self, name: str, **fields: Any) -> InferenceDocument:
        """Set one spec section (``batching``, ``autoscaling``, ``disruption``, ...) to these fields."""
        self._spec[name] = fields
        return self

    def spec(self, **sections: Any) -> InferenceDocument:
        """Set whole spec sections to the values given, as they are."""
        self._spec.update(copy.deepcopy(sections))
        return self

    def merge(self, **sections: Any) -> InferenceDocument:
        """Merge dict values into the spec sections already set (a shallow update); set the others."""
        for key, value in copy.deepcopy(sections).items():
            current = self._spec.get(key)
            merged = isinstance(value, dict) and isinstance(current, dict)
            self._spec[key] = {**current, **value} if merged else value
        return self

    def status(self, status: dict) -> InferenceDocument:
        """Set ``status``, for code that reads what the operator reported."""
        self._doc["status"] = copy.deepcopy(status)
        return self

    def build(self) -> dict:
        """The document, as a new dict."""
        return copy.deepcopy(self._doc)


def inference(name: str = "llm", model: str = "m", path: str | None = None) -> InferenceDocument:
    """An AscendInference ``name`` serving ``model`` (from ``/models/<model>`` unless ``path`` is given)."""
    return InferenceDocument(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {"name": name},
            "spec": {"model": {"name": model, "path": path or f"/models/{model}"}},
        }
    )


def example(file: str) -> InferenceDocument:
    """The AscendInference of ``examples/<file>``, to change further."""
    return InferenceDocument(yaml.safe_load((ROOT / "examples" / file).read_text()))
