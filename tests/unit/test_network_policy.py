"""The NetworkPolicy per fleet: who may reach which port, and how the reconciler keeps it (or takes it away)."""

from __future__ import annotations

import copy

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.settings import NetworkPolicySettings, OperatorSettings, ReconcileSettings
from ascend_fleet.reconcile.plan import plan_pass
from ascend_fleet.reconcile.writes import Observed
from ascend_fleet.render import EXPORTER_PORT, Owner, network_policy, render_all, validate
from ascend_fleet.render.network import engine_selector
from tests.support.documents import inference
from tests.unit.test_reconcile_routing import existing, served

NOW = 1_800_000_000.0
SETTINGS = ReconcileSettings()


def make(name="llm", **spec):
    doc = inference(name).namespace("ai").uid("uid-1").generation(2).engine("vllm-ascend", image="engine:v1")
    return validate(doc.spec(**spec).build())


def policy_of(valid, settings=None) -> dict:
    policy = network_policy(valid.obj.spec, Owner.of(valid.obj), settings)
    assert policy is not None
    return policy


def test_the_policy_selects_the_fleets_engine_pods_and_only_ingress():
    valid = make(parallelism={"tensor": 8, "pipeline": 2, "data": 2})
    spec = policy_of(valid)["spec"]
    pods = [o for o in render_all(valid.obj) if o["kind"] == "Pod"]
    assert len(pods) == 4
    for pod in pods:  # every engine pod, leaders and workers, is guarded
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in spec["podSelector"]["matchLabels"].items())
    assert spec["policyTypes"] == ["Ingress"]  # egress (weights, KV store) stays open


def test_gang_ports_are_open_only_to_the_fleets_own_pods():
    spec = policy_of(make(parallelism={"tensor": 8, "pipeline": 2}))["spec"]
    unrestricted = [rule for rule in spec["ingress"] if "ports" not in rule]
    assert unrestricted == [{"from": [{"podSelector": {"matchLabels": engine_selector("llm")}}]}]


def test_the_http_port_admits_the_picker_and_the_gateway_and_metrics_admit_prometheus():
    spec = policy_of(make(engine={"type": "vllm-ascend", "image": "engine:v1", "port": 8080}))["spec"]
    _, serving, scrape = spec["ingress"]
    assert serving["ports"] == [{"protocol": "TCP", "port": 8080}]
    picker = {names.LABEL_NAME: "llm", names.LABEL_APP_COMPONENT: names.COMPONENT_PICKER}
    assert serving["from"][0] == {"podSelector": {"matchLabels": picker}}
    assert serving["from"][1]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}
    }
    assert scrape["from"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
    }
    assert [p["port"] for p in scrape["ports"]] == [8080, EXPORTER_PORT]


def test_without_the_exporter_prometheus_gets_the_http_port_only():
    spec = policy_of(make(engine={"type": "vllm-ascend", "image": "engine:v1", "exporter": False}))["spec"]
    assert [p["port"] for p in spec["ingress"][2]["ports"]] == [8000]


def test_peers_come_from_the_settings_and_empty_selectors_mean_every_one():
    settings = OperatorSettings.model_validate(
        {
            "networkPolicy": {
                "gateway": {"namespaceLabels": {"team": "edge"}, "podLabels": {"app": "gw"}},
                "prometheus": {"namespaceLabels": {}, "podLabels": {"app": "prom"}},
                "extraPeers": [{"namespaceLabels": {"team": "callers"}, "podLabels": {}}],
            }
        }
    ).network_policy
    _, serving, scrape = policy_of(make(), settings)["spec"]["ingress"]
    assert serving["from"][1:] == [
        {
            "namespaceSelector": {"matchLabels": {"team": "edge"}},
            "podSelector": {"matchLabels": {"app": "gw"}},
        },
        {"namespaceSelector": {"matchLabels": {"team": "callers"}}, "podSelector": {}},
    ]
    assert scrape["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "prom"}}}]


def test_switched_off_nothing_is_rendered():
    valid = make()
    off = NetworkPolicySettings(enabled=False)
    assert network_policy(valid.obj.spec, Owner.of(valid.obj), off) is None
    assert "NetworkPolicy" not in {o["kind"] for o in render_all(valid.obj, network=off)}


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="extra"):
        OperatorSettings.model_validate({"networkPolicy": {"enabeld": False}})


def converged(valid) -> Observed:
    observed = existing(valid)
    assert observed.network_policy is not None
    return observed


def test_the_reconciler_creates_it_and_then_leaves_a_served_one_alone():
    valid = make(parallelism={"tensor": 8, "data": 0})
    first = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS)
    assert [o["kind"] for o in first.creates].count("NetworkPolicy") == 1
    again = plan_pass(valid.obj, valid.layout, converged(valid), NOW, SETTINGS)
    assert not again.writes_children


def test_a_loosened_policy_is_patched_back():
    valid = make(parallelism={"tensor": 8, "data": 0})
    observed = converged(valid)
    assert observed.network_policy is not None
    loosened = copy.deepcopy(observed.network_policy)
    loosened["spec"]["ingress"] = [{}]  # every source, every port
    observed.network_policy = loosened
    result = plan_pass(valid.obj, valid.layout, observed, NOW, SETTINGS)
    [patch] = result.patches
    assert (patch.kind, patch.name) == ("NetworkPolicy", "llm")
    assert patch.body["spec"]["ingress"] == policy_of(valid)["spec"]["ingress"]


def test_switched_off_the_reconciler_deletes_the_one_it_wrote():
    valid = make(parallelism={"tensor": 8, "data": 0})
    off = NetworkPolicySettings(enabled=False)
    result = plan_pass(valid.obj, valid.layout, converged(valid), NOW, SETTINGS, network=off)
    assert [(d.kind, d.name) for d in result.deletes] == [("NetworkPolicy", "llm")]
    assert not result.creates
    going = converged(valid)
    assert going.network_policy is not None
    going.network_policy["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    assert not plan_pass(valid.obj, valid.layout, going, NOW, SETTINGS, network=off).deletes


def test_another_fleets_policy_is_not_this_fleets():
    from ascend_fleet.reconcile.observe import observed_children

    mine = served(policy_of(make()))
    mine["metadata"]["ownerReferences"] = [{"uid": "uid-1", "controller": True}]
    theirs = copy.deepcopy(mine)
    theirs["metadata"]["ownerReferences"] = [{"uid": "uid-2", "controller": True}]
    assert observed_children("uid-1", [], [], [], [theirs]).network_policy is None
    assert observed_children("uid-1", [], [], [], [theirs, mine]).network_policy is mine
