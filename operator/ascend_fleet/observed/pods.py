"""What the pods read back from the cluster say about each replica: complete, ready, failed, draining, which
revision."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..api import names
from ..api.times import parse_rfc3339

# The scheduler a pod without spec.schedulerName gets (the API server's default).
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True)
class ObservedPod:
    """The facts about one engine pod that reconciling needs."""

    name: str
    replica: int
    rank: int
    revision: str
    phase: str
    ready: bool
    failed: bool  # the engine process died: a gang cannot rejoin a collective, so the replica restarts
    serving: bool
    drain_started: float | None
    drain_reason: str | None
    deleting: bool
    # Placement: the node it is bound to ("" while unbound), the scheduler it asked for, the scheduler's
    # PodScheduled=False sentence, whether any PodScheduled condition exists, and when the pod was created.
    node_name: str = ""
    scheduler_name: str = DEFAULT_SCHEDULER
    unschedulable: str | None = None
    scheduling_answered: bool = False
    created: float | None = None

    @classmethod
    def from_pod(cls, pod: dict) -> ObservedPod | None:
        """None for a pod without parseable replica/rank labels (not one of ours to reason about)."""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        try:
            replica, rank = int(labels[names.LABEL_REPLICA]), int(labels[names.LABEL_RANK])
        except (KeyError, ValueError):
            return None
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        scheduled = pod_condition(pod, "PodScheduled")
        return cls(
            name=meta.get("name", ""),
            replica=replica,
            rank=rank,
            revision=labels.get(names.LABEL_REVISION, ""),
            phase=status.get("phase", "Pending"),
            ready=pod_ready(pod),
            failed=_failed(status),
            serving=labels.get(names.LABEL_SERVING) == "true",
            drain_started=parse_rfc3339(annotations.get(names.ANNOTATION_DRAIN_STARTED)),
            drain_reason=annotations.get(names.ANNOTATION_DRAIN_REASON),
            deleting=bool(meta.get("deletionTimestamp")),
            node_name=spec.get("nodeName") or "",
            scheduler_name=spec.get("schedulerName") or DEFAULT_SCHEDULER,
            unschedulable=_unschedulable(scheduled),
            scheduling_answered=scheduled is not None,
            created=parse_rfc3339(meta.get("creationTimestamp")),
        )


def get_condition(conditions: list[dict], type_: str) -> dict | None:
    """The condition of ``type_`` in an object's conditions (a pod's or an AscendInference's), None if none."""
    return next((c for c in conditions if c.get("type") == type_), None)


def pod_condition(pod: dict, type_: str) -> dict | None:
    """The pod's condition of ``type_`` (``Ready``, ``PodScheduled``, ...), None if it has none."""
    return get_condition((pod.get("status") or {}).get("conditions") or [], type_)


def pod_ready(pod: dict) -> bool:
    """Whether the pod's Ready condition is True: the kubelet's verdict that it serves."""
    return (pod_condition(pod, "Ready") or {}).get("status") == "True"


def _unschedulable(scheduled: dict | None) -> str | None:
    """The scheduler's sentence when it could not place the pod (PodScheduled=False), else None."""
    if scheduled is None or scheduled.get("status") != "False":
        return None
    return scheduled.get("message") or scheduled.get("reason") or "the scheduler could not place the pod"


def _failed(status: dict) -> bool:
    if status.get("phase") in ("Failed", "Unknown"):
        return True
    for container in status.get("containerStatuses") or []:
        if container.get("restartCount", 0) > 0:
            return True
        if "terminated" in (container.get("state") or {}):
            return True
    return False


@dataclass
class ObservedReplica:
    """One replica (a data-parallel gang of pods, rank 0 its leader) as its pods show it."""

    index: int
    pods: list[ObservedPod] = field(default_factory=list)
    role: str | None = None  # prefill or decode in a fleet with spec.disaggregation

    @property
    def label(self) -> str:
        """How events name it: ``replica 2``, or ``decode replica 2`` in a two-role fleet."""
        return f"{self.role} replica {self.index}" if self.role else f"replica {self.index}"

    def complete(self, pods_per_replica: int) -> bool:
        return {p.rank for p in self.pods if not p.deleting} == set(range(pods_per_replica))

    @property
    def leader(self) -> ObservedPod | None:
        return next((p for p in self.pods if p.rank == 0), None)

    @property
    def failed(self) -> bool:
        return any(p.failed for p in self.pods)

    @property
    def draining(self) -> bool:
        leader = self.leader
        return leader is not None and leader.drain_started is not None

    @property
    def drain_started(self) -> float | None:
        leader = self.leader
        return leader.drain_started if leader else None

    @property
    def drain_reason(self) -> str | None:
        leader = self.leader
        return leader.drain_reason if leader else None

    def ready(self, pods_per_replica: int) -> bool:
        """Serving: every rank present and Ready, the leader in the Service, nothing failed."""
        return (
            self.complete(pods_per_replica)
            and all(p.ready for p in self.pods)
            and not self.failed
            and not self.draining
        )

    def revisions(self) -> set[str]:
        return {p.revision for p in self.pods}

    def at_revision(self, revision: str) -> bool:
        return bool(self.pods) and self.revisions() == {revision}


def pod_role(pod: dict) -> str | None:
    """The prefill/decode role a pod's label gives it (None for a colocated fleet's pod)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_PD_ROLE)


def observed_replicas(pods: list[dict], role: str | None = None) -> dict[int, ObservedReplica]:
    """The replicas the pods make up, by replica index (pods without replica/rank labels are skipped).

    ``role`` keeps one role's pods of a two-role fleet (None: the pods without a role label).
    """
    groups: dict[int, ObservedReplica] = defaultdict(lambda: ObservedReplica(-1, role=role))
    for pod in pods:
        state = ObservedPod.from_pod(pod)
        if state is None or pod_role(pod) != role:
            continue
        group = groups[state.replica]
        group.index = state.replica
        group.pods.append(state)
    for group in groups.values():
        group.pods.sort(key=lambda p: p.rank)
    return dict(sorted(groups.items()))


POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
    "creationTimestamp",
)
POD_SPEC = ("nodeName", "schedulerName")
POD_STATUS = ("phase", "conditions", "containerStatuses", "startTime")


def slim_pod(pod: dict) -> dict:
    """The parts of a pod the reconciler and the control loop read.

    Pod specs are large and the caches hold every engine pod of the fleet: keeping only these makes
    the operator's memory a few KiB per pod.
    """
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    spec = pod.get("spec") or {}
    return {
        "metadata": {k: meta[k] for k in POD_METADATA if k in meta},
        "spec": {k: spec[k] for k in POD_SPEC if k in spec},
        "status": {k: status[k] for k in POD_STATUS if k in status},
    }
