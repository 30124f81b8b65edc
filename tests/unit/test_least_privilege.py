"""An operator installed without routing permissions, and one that watches only some namespaces."""

from __future__ import annotations

from ascend_fleet.cli.main import build_parser
from ascend_fleet.cli.runtime import watch_namespaces
from ascend_fleet.reconcile.plan import Observed, plan_pass
from ascend_fleet.status.conditions import ROUTING_UNAVAILABLE
from tests.unit.test_reconcile_routing import CLASSES, NOW, SETTINGS, kinds, make, ready


def test_routing_off_creates_no_routing_object_and_says_why():
    valid = make(classes=CLASSES)
    result = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS, routing_enabled=False)
    # the engines' own only
    assert kinds(result.creates) == ["NetworkPolicy", "PodDisruptionBudget", "Service", "Service"]
    assert not result.deletes and not result.patches
    condition = ready(result)
    assert (condition["status"], condition["reason"]) == ("False", ROUTING_UNAVAILABLE)
    assert "routing.enabled: false (the chart's rbac.routing: false)" in condition["message"]
    assert "use mode service, or reinstall with rbac.routing: true" in condition["message"]
    assert [e.reason for e in result.events if e.type == "Warning"] == [ROUTING_UNAVAILABLE]


def test_routing_off_leaves_a_service_mode_fleet_as_it_was():
    valid = make(mode="service")
    off = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS, routing_enabled=False)
    on = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS)
    assert kinds(off.creates) == kinds(on.creates)
    assert ready(off) == ready(on)


def test_watch_namespaces_from_the_environment():
    assert watch_namespaces({"ASCEND_FLEET_WATCH_NAMESPACES": " llm-prod, llm-staging,,llm-prod "}) == [
        "llm-prod",
        "llm-staging",
    ]
    assert watch_namespaces({"ASCEND_FLEET_WATCH_NAMESPACES": ""}) == []
    assert watch_namespaces({}) == []


def test_namespace_flags_are_repeatable():
    args = build_parser().parse_args(["run", "--namespace=llm-prod", "-n", "llm-staging"])
    assert args.namespaces == ["llm-prod", "llm-staging"]
