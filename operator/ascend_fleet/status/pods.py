"""What the operator keeps of each engine pod in its watch caches (shared by the reconciler and the control loop)."""

from __future__ import annotations

POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
)
POD_STATUS = ("phase", "conditions", "containerStatuses", "startTime")


def slim_pod(pod: dict) -> dict:
    """The parts of a pod the reconciler and the control loop read.

    Pod specs are large and the caches hold every engine pod of the fleet: keeping only these makes
    the operator's memory a few KiB per pod.
    """
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in POD_METADATA if k in meta},
        "status": {k: status[k] for k in POD_STATUS if k in status},
    }
