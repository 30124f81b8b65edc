"""The running operator keeps each fleet's NetworkPolicy: created with the fleet, patched back when someone
loosens it, gone with the fleet (its ownerReference)."""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from tests.e2e.fleet import example

pytestmark = pytest.mark.e2e


def test_the_operator_creates_the_policy_and_patches_back_a_loosened_one(fleet):
    doc = example("sglang-small.yaml", rules=[])
    fleet.apply(doc)
    name = doc["metadata"]["name"]

    def policy() -> dict | None:
        found = [
            p for p in fleet.kube.list("NetworkPolicy", fleet.namespace) if p["metadata"]["name"] == name
        ]
        return found[0] if found else None

    created = wait_for(policy, 60, "the fleet's NetworkPolicy")
    assert created["metadata"]["ownerReferences"][0]["kind"] == names.KIND
    rendered_ingress = created["spec"]["ingress"]
    fleet.kube.patch(
        "NetworkPolicy", fleet.namespace, name, {"spec": {"ingress": [{}]}}
    )  # every source and port
    wait_for(
        lambda: (policy() or {}).get("spec", {}).get("ingress") == rendered_ingress,
        60,
        "the loosened policy patched back",
    )
