"""The status models refuse unknown fields, so a misspelt field fails where it is written; a fleet serves in full
only when its status says Ready with every replica ready."""

import pydantic
import pytest

from ascend_fleet.api.v1alpha1 import AscendInferenceStatus, LayoutStatus
from ascend_fleet.status import fleet_serving
from ascend_fleet.status.derive import OTHER_WRITERS_FIELDS, kept_fields


def test_a_misspelt_status_field_fails_instead_of_being_dropped():
    with pytest.raises(pydantic.ValidationError, match="readyReplica"):
        AscendInferenceStatus.model_validate({"readyReplica": 1})  # readyReplicas
    with pytest.raises(pydantic.ValidationError, match="ready_replica"):
        AscendInferenceStatus(ready_replica=1)  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError, match="totalNPUs"):
        AscendInferenceStatus.model_validate({"layout": {"totalNPUs": 8}})


def test_every_derived_field_is_a_status_field_and_the_rest_is_carried_over():
    assert set(AscendInferenceStatus.model_fields) >= OTHER_WRITERS_FIELDS  # no stale name in the set
    stored = AscendInferenceStatus.model_validate(
        {
            "readyReplicas": 3,
            "layout": {"npusPerReplica": 8, "podsPerReplica": 1, "npusPerPod": 8, "totalNpus": 8},
            "actions": [
                {"time": "2026-01-01T00:00:00Z", "rule": "r", "action": "scale_up", "target": "fleet"}
            ],
        }
    )
    kept = kept_fields(stored)
    assert set(kept) == {"actions"}  # derived fields are recomputed by the pass, never carried over
    assert (
        AscendInferenceStatus(**kept, layout=LayoutStatus(**stored.layout.model_dump())).actions
        == stored.actions
    )


def _fleet(data: int, ready_replicas: int | None, ready: str | None) -> dict:
    status: dict = {} if ready_replicas is None else {"readyReplicas": ready_replicas}
    if ready is not None:
        status["conditions"] = [{"type": "Progressing", "status": "True"}, {"type": "Ready", "status": ready}]
    return {"spec": {"parallelism": {"data": data}}, "status": status}


@pytest.mark.parametrize(
    ("data", "ready_replicas", "ready", "serving"),
    [
        (2, 2, "True", True),
        (2, 3, "True", True),  # a surge replica during a rollout
        (2, 1, "True", False),  # Ready (enough replicas serve) but one is still starting
        (2, 2, "False", False),
        (2, 2, None, False),  # no status written yet
        (2, None, "True", False),
        (0, 0, "True", False),  # scaled to zero serves nothing
    ],
)
def test_a_fleet_serves_in_full_when_ready_with_every_replica_it_asks_for(
    data, ready_replicas, ready, serving
):
    assert fleet_serving(_fleet(data, ready_replicas, ready)) is serving
    assert fleet_serving({}) is False
