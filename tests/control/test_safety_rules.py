"""The control loop acts on the built-in safety rule of a spec that lists its own rules (pure)."""

from __future__ import annotations

import dataclasses

from ascend_fleet.control.evaluate import evaluate
from ascend_fleet.control.model import ReplicaInfo
from ascend_fleet.control.npu_health import FaultClock, answer_health, faults_by_node
from ascend_fleet.control.queries import Observations, rule_queries
from ascend_fleet.control.state import object_state
from ascend_fleet.render import validate
from tests.support.documents import example

from .helpers import LONG_AGO, NOW, POLICY, answer
from .test_npu_health import device_info, fault

PLACEMENTS = {0: (("node-a", ("Ascend910-0",)),), 1: (("node-b", ("Ascend910-2",)),)}
PLUGIN = [
    device_info("node-a"),
    device_info("node-b", unhealthy="Ascend910-2", faults=[fault("Ascend910-2", "SeparateNPU")]),
]


def evaluated(doc: dict):
    """One cycle over the example's two replicas, the NPU under replica 1 broken, every other rule quiet."""
    state = object_state(validate(doc))
    replicas = {
        i: ReplicaInfo(i, ready=True, serving_since=LONG_AGO, leader=f"{state.name}-{i}", placement=placement)
        for i, placement in PLACEMENTS.items()
    }
    state = dataclasses.replace(state, replica_states=replicas)
    observations = Observations()
    faults = FaultClock().stamp(faults_by_node(PLUGIN), NOW)
    for rule in state.rules:
        if rule.metric == "npu_unhealthy":
            queries = rule_queries(rule, POLICY.catalog, POLICY.step)
            answer_health(queries, [state], faults, NOW, POLICY.step, observations)
            continue
        quiet = 0.0 if rule.comparison.startswith(">") else rule.threshold + 1
        for replica in PLACEMENTS if rule.scope == "replica" else [None]:
            answer(observations, rule, quiet, 100_000, replica, state.namespace, state.name)
    return state, evaluate(state, observations, NOW, POLICY)


def test_the_replace_rule_acts_beside_the_rules_an_example_lists():
    doc = example("vllm-tp4-pp2-dp2.yaml").build()
    assert "replace" not in [r["action"] for r in doc["spec"]["rules"]]
    state, result = evaluated(doc)
    [decision] = result.decisions
    assert (decision.action, decision.target, decision.rule) == (
        "replace",
        "replica-1",
        "npu_unhealthy > 0 for 30s -> replace",
    )
    assert result.metrics.available
    assert result.metrics.message == "4 rules evaluated (built in: npu_unhealthy > 0 for 30s -> replace)"


def test_switched_off_nothing_replaces_the_replica():
    doc = example("vllm-tp4-pp2-dp2.yaml").spec(safetyRules=False).build()
    state, result = evaluated(doc)
    assert result.decisions == [] and state.builtin == 0
    assert result.metrics.message == "3 rules evaluated"
