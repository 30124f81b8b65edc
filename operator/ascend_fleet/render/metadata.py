"""Names, labels, selectors and owner references of an AscendInference's children, in one place.

Every render module builds its objects' metadata from here, so a child's name or label is spelled once and
the render modules need not import each other for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api import names
from ..api.v1alpha1 import AscendInference


@dataclass(frozen=True)
class Owner:
    """The AscendInference that owns the children (uid is None when rendering offline)."""

    name: str
    namespace: str
    uid: str | None = None
    queue: str | None = None  # Volcano queue of the PodGroups, from the object's queue-name annotation

    @classmethod
    def of(cls, obj: AscendInference) -> Owner:
        """The owner of an object's children."""
        queue = (obj.metadata.get("annotations") or {}).get(names.ANNOTATION_VOLCANO_QUEUE)
        return cls(obj.name, obj.namespace, obj.metadata.get("uid"), queue)

    def reference(self) -> list[dict]:
        """The children's ``ownerReferences`` (none offline, where there is no uid)."""
        if not self.uid:
            return []
        return [
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": self.name,
                "uid": self.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def common_labels(name: str) -> dict[str, str]:
    """The labels every child of an inference carries."""
    return {
        names.LABEL_NAME: name,
        names.LABEL_APP_NAME: names.APP_NAME,
        names.LABEL_APP_INSTANCE: name,
        names.LABEL_APP_MANAGED_BY: names.MANAGED_BY,
    }


def leader_selector(name: str) -> dict[str, str]:
    """Leader pods of an inference: status.selector, for the scale subresource."""
    return {names.LABEL_NAME: name, names.LABEL_ROLE: names.ROLE_LEADER}


def serving_selector(name: str, two_roles: bool = False) -> dict[str, str]:
    """Leaders that take traffic: the serving Service's selector (a drain flips LABEL_SERVING).

    In a two-role fleet only decode leaders: a decode instance without a prefill pairing computes the prompt
    itself, while a prefill instance alone would only hand its KV cache over.
    """
    selector = {**leader_selector(name), names.LABEL_SERVING: "true"}
    if two_roles:
        selector[names.LABEL_PD_ROLE] = names.PD_DECODE
    return selector


def pod_name(name: str, replica: int, rank: int, role: str | None = None) -> str:
    """``<name>-<replica>`` for leaders, ``<name>-<replica>-<rank>`` for workers (as LeaderWorkerSet); in a
    two-role fleet ``<name>-<role>-<replica>[-<rank>]``."""
    base = f"{name}-{role}" if role else name
    return f"{base}-{replica}" if rank == 0 else f"{base}-{replica}-{rank}"


def headless_service_name(name: str) -> str:
    """The headless Service that gives every pod of the inference a DNS name."""
    return f"{name}-pods"


def leader_address(name: str, replica: int, role: str | None = None) -> str:
    """The DNS name of a replica's leader, through the headless Service (the namespace from the pod's env)."""
    return f"{pod_name(name, replica, 0, role)}.{headless_service_name(name)}.$(POD_NAMESPACE).svc"


def pod_group_name(name: str, replica: int, role: str | None = None) -> str:
    """Volcano's PodGroup of one replica."""
    return f"{name}-{role}-{replica}" if role else f"{name}-{replica}"


def metadata(owner: Owner, name: str, labels: dict[str, str]) -> dict:
    """A child's ``metadata``: name, namespace, labels and, in a cluster, the owner reference."""
    meta: dict[str, Any] = {"name": name, "namespace": owner.namespace, "labels": labels}
    refs = owner.reference()
    if refs:
        meta["ownerReferences"] = refs
    return meta
