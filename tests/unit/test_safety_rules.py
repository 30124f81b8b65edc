"""The built-in safety rules run beside the rules a spec lists, and only an explicit field turns them off."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from ascend_fleet.api.crd import openapi_schema
from ascend_fleet.api.policy import builtin_safety_rules
from ascend_fleet.cli.main import main
from ascend_fleet.render import validate
from tests.support.documents import inference
from tests.support.paths import EXAMPLES, ROOT

REPLACE = "npu_unhealthy > 0 for 30s -> replace"


def in_force(doc: dict) -> list[str]:
    return [rule.describe() for rule in validate(doc).obj.spec.rules_in_force()]


def base():
    return inference("qwen").engine("vllm-ascend")


def listing_rules() -> list:
    """Every example whose spec lists rules, and the README's AscendInference."""
    docs = [
        pytest.param(doc, id=path.name)
        for path in EXAMPLES
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "AscendInference" and "rules" in doc["spec"]
    ]
    readme = (ROOT / "README.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", readme, re.S)]
    docs += [pytest.param(b, id="README") for b in blocks if b and b.get("kind") == "AscendInference"]
    return docs


@pytest.mark.parametrize("doc", listing_rules())
def test_every_example_that_lists_rules_keeps_the_replace_rule(doc):
    listed = [rule.describe() for rule in validate(doc).obj.spec.rules]
    assert in_force(doc).count(REPLACE) == 1
    assert in_force(doc)[: len(listed)] == listed  # the listed rules first, as written


def test_the_examples_that_list_rules_are_the_many():
    assert len(listing_rules()) >= 5  # the test above is not vacuous


def test_defaults_are_the_briefs_two_rules_and_the_safety_rule():
    assert in_force(base().build()) == [
        "npu_utilization > 85% for 5m -> scale_up",
        "mem_fragmentation > 15% for 10m -> restart_service",
        REPLACE,
    ]


def test_listed_rules_add_to_the_safety_rule():
    doc = base().rule("npu_utilization", "90%", "scale_up").build()
    assert in_force(doc) == ["npu_utilization > 90% for 5m -> scale_up", REPLACE]


def test_an_empty_list_keeps_the_safety_rule_and_the_field_turns_it_off():
    assert in_force(base().rules([]).build()) == [REPLACE]
    assert in_force(base().rules([]).spec(safetyRules=False).build()) == []
    listed = base().rule("npu_utilization", "90%", "scale_up").spec(safetyRules=False).build()
    assert in_force(listed) == ["npu_utilization > 90% for 5m -> scale_up"]


def test_a_listed_rule_with_the_same_metric_and_action_takes_its_place():
    doc = base().rule("npu_unhealthy", 0, "replace", window="10s").build()
    assert in_force(doc) == ["npu_unhealthy > 0 for 10s -> replace"]
    # Only notifying on the metric is not a replacement: the safety rule stays.
    notify = base().rule("npu_unhealthy", 0, "notify", window="10s").build()
    assert in_force(notify) == ["npu_unhealthy > 0 for 10s -> notify", REPLACE]


def test_the_crd_has_the_field_as_a_boolean():
    field = openapi_schema()["properties"]["spec"]["properties"]["safetyRules"]
    assert field["type"] == "boolean" and "Default: true" in field["description"]
    assert REPLACE in field["description"]


def test_builtin_rules_are_the_replace_rule():
    assert [r.describe() for r in builtin_safety_rules()] == [REPLACE]


def test_validate_shows_the_safety_rule_it_runs(tmp_path, capsys):
    on = tmp_path / "on.yaml"
    on.write_text(yaml.safe_dump(base().rule("npu_utilization", "90%", "scale_up").build()))
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump(base().spec(safetyRules=False).build()))
    assert main(["validate", str(on), str(off)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"  built-in safety rule: {REPLACE} (spec.safetyRules: false turns it off)"
    assert out[2].startswith(f"{off}: qwen is valid") and len(out) == 3
    assert main(["validate", "-o", "json", str(on), str(off)]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert [item["safetyRules"] for item in items] == [[REPLACE], []]
