"""Rules on a two-role fleet: each reads its role's series and scales or restarts its role, within the role's
bounds and spec.disaggregation.ratio."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import promql_parser
import pytest
import yaml

from ascend_fleet.api.crd import crd
from ascend_fleet.api.disaggregation import RatioBound
from ascend_fleet.api.times import rfc3339
from ascend_fleet.api.v1alpha1 import Autoscaling, Rule
from ascend_fleet.control.actions import action_for, decision_result
from ascend_fleet.control.evaluate import evaluate
from ascend_fleet.control.model import FleetState, PastAction, ReplicaInfo, RoleState
from ascend_fleet.control.queries import Observations, rule_queries
from ascend_fleet.control.state import fleet_state
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.render.children import render_all
from tests.control.helpers import LONG_AGO, NAME, NOW, NS, POLICY, answer, rule
from tests.support.crdcheck import api_server_errors
from tests.support.documents import inference

CRD = crd()
TTFT_UP = rule("ttft_p99", "2s", action="scale_up", role="prefill")
TPOT_UP = rule("queue_depth", 8, action="scale_up", role="decode")


def _replicas(role: str, count: int) -> dict[int, ReplicaInfo]:
    return {
        i: ReplicaInfo(i, ready=True, serving_since=LONG_AGO, leader=f"{NAME}-{role}-{i}-0")
        for i in range(count)
    }


def two_roles(
    *rules: Rule,
    prefill: int = 1,
    decode: int = 2,
    ratio: RatioBound | None = None,
    prefill_max: int = 8,
    decode_min: int = 1,
    actions: tuple[PastAction, ...] = (),
    max_unavailable: int = 1,
) -> FleetState:
    roles = {
        "prefill": RoleState(prefill, 1, prefill_max, replica_states=_replicas("prefill", prefill)),
        "decode": RoleState(decode, decode_min, 8, replica_states=_replicas("decode", decode)),
    }
    return FleetState(
        NS,
        NAME,
        1,
        tuple(rules),
        Autoscaling(),
        max_unavailable,
        actions=actions,
        roles=roles,
        ratio=ratio,
    )


def held(*pairs: tuple[Rule, float], replica: int | None = None) -> Observations:
    """Prometheus' answers: each rule's window at that value (of ``replica``, for replica-scoped rules)."""
    observations = Observations()
    for r, value in pairs:
        answer(observations, r, value, replica=replica)
    return observations


# ----- queries -----


def test_a_role_scoped_rule_reads_only_its_roles_series():
    [prefill, _] = rule_queries(TTFT_UP, POLICY.catalog, POLICY.step)
    [decode, _] = rule_queries(rule("ttft_p99", "2s", role="decode"), POLICY.catalog, POLICY.step)
    [plain, _] = rule_queries(rule("ttft_p99", "2s"), POLICY.catalog, POLICY.step)
    text = prefill.promql(POLICY.step)
    assert POLICY.catalog.expression("ttft_p99") in text  # the catalog entry, kept whole
    assert (
        'and on (namespace, inference, pd_role) group by (namespace, inference, pd_role) (up{pd_role="prefill"})'
        in text
    )
    assert 'pd_role="decode"' in decode.promql(POLICY.step) and 'pd_role="prefill"' not in decode.promql(
        POLICY.step
    )
    assert "pd_role=" not in plain.promql(POLICY.step)
    # Each role is its own query, so a replica index of one role never answers for the other's.
    assert len({prefill, decode, plain}) == 3


def test_the_role_filter_parses_with_every_catalog_entry():
    for metric in POLICY.catalog.promql():
        [query, _] = rule_queries(rule(metric, 1, role="decode"), POLICY.catalog, POLICY.step)
        promql_parser.parse(query.promql(POLICY.step))


# ----- scaling a role -----


def test_scale_up_with_role_prefill_changes_only_the_prefill_instances():
    fleet = two_roles(TTFT_UP, TPOT_UP)
    [decision] = evaluate(fleet, held((TTFT_UP, 3.0), (TPOT_UP, 1.0)), NOW, POLICY).decisions
    assert (decision.action, decision.role, decision.target) == ("scale_up", "prefill", "prefill")
    assert (decision.replicas_from, decision.replicas_to) == (1, 2)
    [write] = action_for("scale_up").writes(decision, NOW)
    assert write.patch == {"spec": {"disaggregation": {"prefill": {"parallelism": {"data": 2}}}}}
    assert decision_result(decision) == "prefill replicas 1 -> 2"


def test_both_roles_scale_in_one_cycle_each_by_its_own_rule():
    fleet = two_roles(TTFT_UP, TPOT_UP)
    decisions = evaluate(fleet, held((TTFT_UP, 3.0), (TPOT_UP, 20.0)), NOW, POLICY).decisions
    assert [(d.role, d.replicas_from, d.replicas_to) for d in decisions] == [
        ("prefill", 1, 2),
        ("decode", 2, 3),
    ]


def test_the_roles_bounds_stop_a_scale_up():
    ev = evaluate(two_roles(TTFT_UP, prefill_max=1), held((TTFT_UP, 3.0)), NOW, POLICY)
    assert ev.decisions == [] and any("at maxReplicas (1)" in note for note in ev.notes), ev.notes


def test_the_cooldown_is_counted_per_role():
    recent = (PastAction(NOW - 10, "r", "scale_up", "prefill"),)
    fleet = two_roles(TTFT_UP, TPOT_UP, actions=recent)
    decisions = evaluate(fleet, held((TTFT_UP, 3.0), (TPOT_UP, 20.0)), NOW, POLICY).decisions
    assert [d.role for d in decisions] == ["decode"]


def test_a_scale_past_the_ratio_does_not_act_and_its_record_says_why():
    fleet = two_roles(TTFT_UP, ratio=RatioBound(max=0.5))  # 1 prefill : 2 decode; 2:2 would be 1 per decode
    ev = evaluate(fleet, held((TTFT_UP, 3.0)), NOW, POLICY)
    [decision] = ev.decisions
    assert decision.replicas_from == decision.replicas_to == 1
    assert action_for("scale_up").writes(decision, NOW) == ()
    assert decision_result(decision) == (
        "prefill replicas stay 1: scaling up prefill would make prefill:decode 2:2 (1 prefill per decode), above "
        "ratio.max 0.5 (spec.disaggregation.ratio)"
    )
    assert "above ratio.max 0.5" in action_for("scale_up").message(decision)


def test_a_scale_down_below_the_ratio_does_not_act():
    down = rule("queue_depth", 1, comparison="<", action="scale_down", role="decode")
    fleet = two_roles(down, prefill=1, decode=2, ratio=RatioBound(max=0.5))  # 1:1 would be above 0.5
    [decision] = evaluate(fleet, held((down, 0.0)), NOW, POLICY).decisions
    assert decision.held_by is not None and "prefill:decode 1:1" in decision.held_by
    within = two_roles(down, prefill=1, decode=3, ratio=RatioBound(max=0.5))  # 1:2 fits
    [scaled] = evaluate(within, held((down, 0.0)), NOW, POLICY).decisions
    assert (scaled.replicas_from, scaled.replicas_to, scaled.held_by) == (3, 2, None)


def test_a_held_scale_counts_as_the_cooldowns_record():
    fleet = two_roles(TTFT_UP, ratio=RatioBound(max=0.5))
    [decision] = evaluate(fleet, held((TTFT_UP, 3.0)), NOW, POLICY).decisions
    recorded = (PastAction(NOW - 10, decision.rule, "scale_up", decision.target),)
    again = two_roles(TTFT_UP, ratio=RatioBound(max=0.5), actions=recorded)
    assert evaluate(again, held((TTFT_UP, 3.0)), NOW, POLICY).decisions == []


# ----- replica actions -----


def test_a_restart_with_a_role_drains_a_replica_of_that_role():
    restart = rule("mem_fragmentation", "15%", action="restart_service", role="decode")
    [decision] = evaluate(two_roles(restart), held((restart, 0.5), replica=1), NOW, POLICY).decisions
    assert (decision.target, decision.replica, decision.leader) == (
        "decode-replica-1",
        1,
        f"{NAME}-decode-1-0",
    )
    assert decision_result(decision) == "draining decode replica 1 to recreate it"


def test_the_disruption_budget_is_the_fleets_across_roles():
    restart = rule("mem_fragmentation", "15%", action="restart_service", role="decode")
    fleet = two_roles(restart)
    prefill = fleet.roles["prefill"]
    not_ready = {0: ReplicaInfo(0, ready=False, serving_since=LONG_AGO, leader="p")}
    roles = {
        **fleet.roles,
        "prefill": RoleState(1, replica_states=not_ready, max_replicas=prefill.max_replicas),
    }
    ev = evaluate(replace(fleet, roles=roles), held((restart, 0.5), replica=1), NOW, POLICY)
    assert ev.decisions == [] and any("disruption budget" in note for note in ev.notes), ev.notes


# ----- the object -----


def _doc(rules: list[dict] | None = None, engine: str = "vllm-ascend", **split) -> dict:
    disaggregation = {
        "prefill": {"parallelism": {"tensor": 4}},
        "decode": {"parallelism": {"tensor": 2, "data": 2}},
        **split,
    }
    builder = inference("pd").namespace(NS).uid("u1").engine(engine).merge(disaggregation=disaggregation)
    if rules is not None:
        builder = builder.merge(rules=rules)
    return builder.build()


WIRE_RULE = {"metric": "ttft_p99", "threshold": "2s", "for": "2m", "action": "scale_up"}


def test_the_state_of_a_two_role_fleet_reads_each_roles_pods():
    doc = _doc(
        [{**WIRE_RULE, "role": "prefill"}],
        prefill={"parallelism": {"tensor": 4}, "autoscaling": {"maxReplicas": 3}},
    )
    valid = validate(doc)
    pods = [o for o in render_all(valid.obj) if o["kind"] == "Pod"]
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [{"uid": "u1", "controller": True}]
        pod["status"] = {
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(LONG_AGO)}]
        }
    state = fleet_state(valid, pods)
    assert {
        role: (r.replicas, r.max_replicas, sorted(r.replica_states)) for role, r in state.roles.items()
    } == {
        "prefill": (1, 3, [0]),
        "decode": (2, 8, [0, 1]),
    }
    assert state.for_role("decode").replica_states[1].leader.startswith("pd-decode-1")
    assert state.rules[0].role == "prefill" and state.builtin == 2
    assert [r.describe() for r in state.rules[1:]] == [
        "npu_unhealthy > 0 for 30s -> replace prefill",
        "npu_unhealthy > 0 for 30s -> replace decode",
    ]


def test_sglang_caps_its_prefill_instances_at_one():
    doc = _doc([{**WIRE_RULE, "role": "prefill"}], engine="sglang", prefill={"parallelism": {"tensor": 2}})
    state = fleet_state(validate(doc), [])
    assert state.roles["prefill"].max_replicas == 1 and "MemFabric" in (state.roles["prefill"].limit or "")


def test_a_two_role_fleet_without_rules_runs_the_safety_rule_of_each_role_only():
    spec = validate(_doc()).obj.spec
    assert spec.rules == [] and [(r.metric, r.action, r.role) for r in spec.rules_in_force()] == [
        ("npu_unhealthy", "replace", "prefill"),
        ("npu_unhealthy", "replace", "decode"),
    ]
    off = inference("pd").engine("vllm-ascend").merge(disaggregation=_doc()["spec"]["disaggregation"])
    assert validate(off.merge(safetyRules=False).build()).obj.spec.rules_in_force() == []


def test_a_listed_replace_rule_of_one_role_takes_that_roles_safety_rule_only():
    listed = {"metric": "npu_unhealthy", "threshold": 1, "for": "2m", "action": "replace", "role": "decode"}
    in_force = validate(_doc([listed])).obj.spec.rules_in_force()
    assert [r.describe() for r in in_force] == [
        "npu_unhealthy > 1 for 2m -> replace decode",
        "npu_unhealthy > 0 for 30s -> replace prefill",
    ]


# Each refused both by the CRD (kubectl apply) and by validate (the InvalidSpec condition), with what fits.
REFUSED = {
    "rule without role on two roles": (_doc([WIRE_RULE]), "add role: prefill or role: decode"),
    "role on one role": (
        inference("one").engine("vllm-ascend").merge(rules=[{**WIRE_RULE, "role": "decode"}]).build(),
        "needs spec.disaggregation",
    ),
    "layout below ratio.min": (_doc(ratio={"min": 1}), "below ratio.min"),
    "layout above ratio.max": (_doc(ratio={"max": 0.25}), "above ratio.max"),
    "ratio min above max": (_doc(ratio={"min": 2, "max": 1}), "ratio.min must be <= ratio.max"),
    "bad role": (_doc([{**WIRE_RULE, "role": "encode"}]), "role"),
    "zero ratio": (_doc(ratio={"min": 0}), "min"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_refused_by_the_crd_and_by_validate(case):
    doc, words = REFUSED[case]
    errors = api_server_errors(CRD, doc)
    assert any(words in e for e in errors), errors
    with pytest.raises(InvalidSpec) as refused:
        validate(doc)
    assert words in "; ".join(refused.value.problems)


ACCEPTED = {
    "role rules": _doc(
        [
            {**WIRE_RULE, "role": "prefill"},
            {**WIRE_RULE, "metric": "queue_depth", "threshold": 8, "role": "decode"},
        ]
    ),
    "layout within the ratio": _doc(ratio={"min": 0.5, "max": 0.5}),
    "one-sided ratio": _doc(ratio={"max": 1}),
}


@pytest.mark.parametrize("case", ACCEPTED, ids=list(ACCEPTED))
def test_accepted_by_the_crd_and_by_validate(case):
    assert api_server_errors(CRD, ACCEPTED[case]) == []
    validate(ACCEPTED[case])


def test_the_documented_per_role_example_is_accepted_and_reads_each_role():
    """docs/disaggregation.md's "Operating per role" example, on the two-role example fleet."""
    root = Path(__file__).resolve().parents[2]
    section = (root / "docs" / "disaggregation.md").read_text().split("## Operating per role", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    doc = yaml.safe_load((root / "examples" / "vllm-disaggregated.yaml").read_text())
    documented = yaml.safe_load(block.group(1))["spec"]
    doc["spec"]["autoscaling"] = documented["autoscaling"]
    doc["spec"]["rules"] = documented["rules"]
    for role in ("prefill", "decode"):
        doc["spec"]["disaggregation"][role] = documented["disaggregation"][role]
    doc["spec"]["disaggregation"]["ratio"] = documented["disaggregation"]["ratio"]
    doc["metadata"]["namespace"] = "team-a"
    assert api_server_errors(CRD, doc) == []
    rules = validate(doc).obj.spec.rules
    assert [r.role for r in rules] == ["prefill", "decode", "decode", "prefill"]
    [tpot, _] = rule_queries(rules[1], POLICY.catalog, POLICY.step)
    assert 'up{pd_role="decode"}' in tpot.promql(POLICY.step)
