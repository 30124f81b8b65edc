"""A test's view of one namespace: apply AscendInferences and read their children, via the API only."""

from __future__ import annotations

import copy
from typing import TypeVar

from ascend_fleet.api import names
from ascend_fleet.kube import Kube, wait_for
from tests.support.documents import example as example_document

T = TypeVar("T")


def example(name: str, **spec_changes) -> dict:
    """The example file ``name`` with whole spec sections replaced."""
    return example_document(name).spec(**spec_changes).build()


def without_warnings(message: str) -> str:
    """A condition's message without the ``; warning: ...`` sentences ``validate``'s warnings add to Ready's
    (e.g. an upstream engine image without the exporter, as the tests' fleets use)."""
    return message.split("; warning: ")[0]


class Fleet:
    def __init__(self, kube: Kube, namespace: str):
        self.kube, self.namespace = kube, namespace

    def apply(self, doc: dict) -> dict:
        doc = copy.deepcopy(doc)
        doc["metadata"]["namespace"] = self.namespace
        created = self.kube.create(doc, exist_ok=False)
        assert created is not None
        return created

    def get(self, name: str) -> dict:
        return self.kube.get(names.KIND, self.namespace, name)

    def patch_spec(self, name: str, spec: dict) -> dict:
        return self.kube.patch(names.KIND, self.namespace, name, {"spec": spec})

    def scale(self, name: str, replicas: int) -> dict:
        return self.kube.patch(names.KIND, self.namespace, name, {"spec": {"replicas": replicas}}, "scale")

    def pods(self, name: str) -> list[dict]:
        return sorted(
            self.kube.list("Pod", self.namespace, {names.LABEL_NAME: name}),
            key=lambda p: p["metadata"]["name"],
        )

    def pod_names(self, name: str) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods(name) if not p["metadata"].get("deletionTimestamp")]

    def condition(self, name: str, type_: str) -> dict:
        return next(
            (c for c in self.get(name).get("status", {}).get("conditions", []) if c["type"] == type_), {}
        )

    def ready(self, name: str, replicas: int) -> dict | None:
        obj = self.get(name)
        status = obj.get("status", {})
        done = (
            status.get("readyReplicas") == replicas
            and status.get("updatedReplicas") == replicas
            and status.get("replicas") == replicas
            and status.get("observedGeneration") == obj["metadata"].get("generation")
        )
        return obj if done else None

    def wait_ready(self, name: str, replicas: int, timeout: float = 20.0) -> dict:
        return wait_for(lambda: self.ready(name, replicas), timeout, f"{name} with {replicas} ready replicas")

    def events(self, reason: str | None = None) -> list[dict]:
        items = self.kube.list_events(self.namespace)
        return [e for e in items if reason is None or e.get("reason") == reason]
