"""The actions table is the one home of a rule action's data: the API, the cooldowns and the docs agree with it."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from ascend_fleet.api.actions import ACTION_NAMES, ACTIONS, action_kind
from ascend_fleet.api.v1alpha1 import Action, Autoscaling, Rule
from tests.support.paths import ROOT


def test_the_action_enum_is_the_table():
    assert (
        get_args(Action)
        == ACTION_NAMES
        == ("scale_up", "scale_down", "restart_service", "replace", "shift_traffic", "notify")
    )


@pytest.mark.parametrize("kind", ACTIONS, ids=lambda kind: kind.name)
def test_a_rule_gets_the_default_scope_and_refuses_another_where_bound(kind):
    to = {"to": "int8"} if kind.takes_variant else {}
    rule = Rule(metric="npu_utilization", threshold=0.5, for_="1m", action=kind.name, **to)
    assert rule.scope == kind.scope
    other = "fleet" if kind.scope == "replica" else "replica"
    if kind.scope_only:
        with pytest.raises(ValidationError, match="use scope: replica"):
            Rule(metric="npu_utilization", threshold=0.5, for_="1m", action=kind.name, scope=other, **to)
    else:
        assert (
            Rule(
                metric="npu_utilization", threshold=0.5, for_="1m", action=kind.name, scope=other, **to
            ).scope
            == other
        )


def test_every_cooldown_names_an_autoscaling_duration():
    autoscaling = Autoscaling()
    for kind in ACTIONS:
        assert all(isinstance(getattr(autoscaling, name), float) for name in kind.cooldowns), kind.name


def test_every_action_has_its_row_in_the_control_loop_page():
    page = (ROOT / "docs" / "control-loop.md").read_text()
    assert [kind.name for kind in ACTIONS if f"| `{kind.name}` |" not in page] == []


def test_an_unknown_action_has_no_row():
    with pytest.raises(KeyError):
        action_kind("reboot")
