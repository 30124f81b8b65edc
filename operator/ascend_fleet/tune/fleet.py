"""The fleet side of a tuning run, through the Kubernetes API only, as a user's kubectl would do it.

Each rung patches ``spec.batching`` (a JSON merge patch), then waits for the operator's rollout the way
``kubectl rollout status`` waits for a Deployment: ``status.observedGeneration`` has reached the
patched generation and every desired replica is updated and ready. The benchmark then talks to replica
0's serving leader directly, because batching is per replica: through the Service the load would be
spread over all replicas.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import requests

from ..api import names
from ..api.v1alpha1 import AscendInference, TuningRecord
from ..kube import Kube
from ..kube.client import NotFound
from ..observed import ObservedPod
from .patch import status_patch


class FleetError(RuntimeError):
    """The fleet cannot be tuned as asked; the message says why and what would fit."""


@dataclass
class Fleet:
    """One AscendInference in a cluster."""

    kube: Kube
    namespace: str
    name: str
    poll_seconds: float = 0.5

    def read(self) -> AscendInference:
        try:
            body = self.kube.get(names.KIND, self.namespace, self.name)
        except NotFound:
            raise FleetError(
                f"AscendInference {self.namespace}/{self.name} is not in the cluster; apply it first "
                f"(kubectl apply -f ...), then tune it"
            ) from None
        return AscendInference.model_validate(body)

    def patch_spec(self, patch: dict) -> int:
        """Apply a merge patch to the spec; the generation the rollout must reach."""
        written = self.kube.patch(names.KIND, self.namespace, self.name, patch)
        return int(written.get("metadata", {}).get("generation") or 0)

    def record(self, record: TuningRecord, attempts: int = 3) -> None:
        """Write ``status.tuning`` (status subresource, merge patch: nothing else in status changes).

        Read back, and written again if another writer's older status replaced it in between."""
        for _ in range(attempts):
            self.kube.patch(names.KIND, self.namespace, self.name, status_patch(record), "status")
            time.sleep(self.poll_seconds)
            stored = (self.kube.get(names.KIND, self.namespace, self.name).get("status") or {}).get(
                "tuning"
            ) or {}
            if stored.get("tableHash") == record.table_hash and stored.get("time") == record.time:
                return
        raise FleetError(
            f"status.tuning of {self.namespace}/{self.name} was overwritten {attempts} times; "
            f"another writer replaces the status"
        )

    def wait_rollout(
        self, generation: int, timeout: float, on_wait: Callable[[str], None] | None = None
    ) -> None:
        """Until the operator has observed ``generation`` and every replica is updated and ready."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            body = self.kube.get(names.KIND, self.namespace, self.name)
            status = body.get("status") or {}
            wanted = int(((body.get("spec") or {}).get("parallelism") or {}).get("data", 1))
            observed = int(status.get("observedGeneration") or 0)
            updated, ready = int(status.get("updatedReplicas") or 0), int(status.get("readyReplicas") or 0)
            last = (
                f"observedGeneration {observed}/{generation}, updated {updated}/{wanted}, "
                f"ready {ready}/{wanted}"
            )
            if on_wait is not None:
                on_wait(last)
            if observed >= generation and updated >= wanted and ready >= wanted:
                return
            if time.monotonic() > deadline:
                raise FleetError(
                    f"the rollout did not finish within {timeout:g}s ({last}); is the operator "
                    f"running? kubectl describe ainf {self.name} -n {self.namespace} says why"
                )
            time.sleep(self.poll_seconds)

    def leader_endpoint(self, port: int, timeout: float) -> str:
        """``http://<ip>:<port>`` of replica 0's ready, serving leader, once its ``/health`` answers."""
        selector = {names.LABEL_NAME: self.name, names.LABEL_REPLICA: "0", names.LABEL_RANK: "0"}
        deadline = time.monotonic() + timeout
        while True:
            for pod in self.kube.list("Pod", self.namespace, selector):
                state = ObservedPod.from_pod(pod)
                ip = (pod.get("status") or {}).get("podIP")
                if state and ip and state.ready and state.serving and not state.deleting:
                    url = f"http://{ip}:{port}"
                    if _healthy(url):
                        return url
            if time.monotonic() > deadline:
                raise FleetError(
                    f"replica 0 of {self.namespace}/{self.name} has no ready, serving leader "
                    f"answering /health after {timeout:g}s"
                )
            time.sleep(self.poll_seconds)


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/health", timeout=2.0).status_code == 200
    except requests.RequestException:
        return False
