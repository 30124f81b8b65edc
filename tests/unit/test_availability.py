"""spec.availability: spread constraints on leaders, short node-failure tolerations, refused bad input."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ascend_fleet.api import names
from ascend_fleet.api.availability import Availability
from ascend_fleet.render import render_all, validate
from tests.support.documents import inference


def pods(**spec):
    doc = inference("llm").uid("u-1").engine("vllm-ascend").spec(**spec).build()
    return [o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"]


def test_absent_availability_renders_no_spread_and_no_tolerations():
    (pod,) = pods()
    assert "topologySpreadConstraints" not in pod["spec"]
    assert "tolerations" not in pod["spec"]


def test_zone_spread_counts_this_inferences_leaders_with_min_domains():
    (pod,) = pods(availability={"spread": "zone", "minDomains": 3})
    (constraint,) = pod["spec"]["topologySpreadConstraints"]
    assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
    assert constraint["whenUnsatisfiable"] == "DoNotSchedule"
    assert constraint["minDomains"] == 3
    assert constraint["labelSelector"]["matchLabels"] == {
        names.LABEL_NAME: "llm",
        names.LABEL_ROLE: names.ROLE_LEADER,
    }


def test_gang_spreads_by_leader_and_every_rank_tolerates_node_failure_briefly():
    leader, worker = pods(
        parallelism={"tensor": 8, "pipeline": 2, "data": 1},
        engine={"type": "vllm-ascend", "multiNode": "ray"},
        availability={"spread": "node", "unreachableTolerationSeconds": 7},
    )
    assert leader["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert "topologySpreadConstraints" not in worker["spec"]
    for pod in (leader, worker):
        tolerations = {t["key"]: t for t in pod["spec"]["tolerations"]}
        assert set(tolerations) == {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}
        assert all(t["effect"] == "NoExecute" and t["tolerationSeconds"] == 7 for t in tolerations.values())


def test_user_tolerations_are_kept_next_to_the_failure_ones():
    own = {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}
    (pod,) = pods(scheduling={"tolerations": [own]}, availability={})
    assert pod["spec"]["tolerations"][0] == own
    assert len(pod["spec"]["tolerations"]) == 3


def test_a_templates_lists_do_not_drop_the_availability_entries():
    # A template's tolerations and spread constraints replace the rendered lists (strategic merge); the
    # availability entries are added after the merge, so both the user's and the operator's stay.
    own_toleration = {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}
    own_spread = {
        "maxSkew": 2,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"team": "a"}},
    }
    (pod,) = pods(
        template={"spec": {"tolerations": [own_toleration], "topologySpreadConstraints": [own_spread]}},
        availability={"spread": "node"},
    )
    assert [t["key"] for t in pod["spec"]["tolerations"]] == [
        "dedicated",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ]
    assert [c["topologyKey"] for c in pod["spec"]["topologySpreadConstraints"]] == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]


@pytest.mark.parametrize("bad", [{"minDomains": 1}, {"spread": "rack"}, {"unreachableTolerationSeconds": -1}])
def test_bad_availability_is_refused(bad):
    with pytest.raises(ValidationError):
        Availability.model_validate(bad)
