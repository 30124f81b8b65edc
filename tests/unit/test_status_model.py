"""The status models refuse unknown fields, so a misspelt field fails where it is written."""

import pydantic
import pytest

from ascend_fleet.api.v1alpha1 import AscendInferenceStatus, LayoutStatus
from ascend_fleet.reconcile.fleet_status import OTHER_WRITERS_FIELDS, kept_fields


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
