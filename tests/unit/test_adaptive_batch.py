"""spec.batching.ttftTarget and minBatchSize: the endpoint picker's adaptive in-flight limit.

The rendered picker configuration carries the project's plugin (tools/epp/adaptive) with the fleet's bounds
and target, in every scheduling profile after the saturation filter; what cannot work is refused by the CRD's
rules (checked with the CRD's own CEL) and by the operator with a sentence.
"""

from __future__ import annotations

import pytest
import yaml

from ascend_fleet.render import InvalidSpec, Owner, validate
from ascend_fleet.render.picker_config import ADAPTIVE_LIMIT, picker_config
from ascend_fleet.render.routing import render_routing
from tests.support.crdcheck import api_server_errors
from tests.support.documents import inference
from tests.support.paths import CRD_FILE

CRD = yaml.safe_load(CRD_FILE.read_text())


def doc(batching: dict, mode: str = "inferencePool", **spec) -> dict:
    return (
        inference("llm", "qwen")
        .namespace("team-a")
        .uid("u-1")
        .engine("vllm-ascend")
        .spec(batching=batching, routing={"mode": mode}, **spec)
        .build()
    )


def plugin_of(config: dict) -> list[dict]:
    return [p for p in config["plugins"] if p["type"] == ADAPTIVE_LIMIT]


def test_ttft_target_renders_the_plugin_with_bounds_and_target_after_the_saturation_filter():
    obj = validate(doc({"maxBatchSize": 16, "minBatchSize": 4, "ttftTarget": "500ms"})).obj
    config = picker_config(obj.spec, Owner.of(obj))
    assert plugin_of(config) == [
        {"type": ADAPTIVE_LIMIT, "parameters": {"minBatchSize": 4, "maxBatchSize": 16, "ttftTargetMs": 500}}
    ]
    (profile,) = config["schedulingProfiles"]
    refs = [p["pluginRef"] for p in profile["plugins"]]
    assert refs.index(ADAPTIVE_LIMIT) == refs.index("utilization-detector") + 1
    assert refs.index(ADAPTIVE_LIMIT) < refs.index("queue-scorer")
    # The ConfigMap the picker reads holds the same configuration.
    (config_map,) = [o for o in render_routing(obj.spec, Owner.of(obj)) if o["kind"] == "ConfigMap"]
    assert plugin_of(yaml.safe_load(config_map["data"]["epp.yaml"])) == plugin_of(config)


def test_min_batch_size_defaults_to_one_and_a_fractional_target_keeps_its_milliseconds():
    obj = validate(doc({"maxBatchSize": 8, "ttftTarget": "1.5s"})).obj
    ((plugin,),) = [plugin_of(picker_config(obj.spec))]
    assert plugin["parameters"] == {"minBatchSize": 1, "maxBatchSize": 8, "ttftTargetMs": 1500}
    obj = validate(doc({"maxBatchSize": 8, "ttftTarget": "0.2505s"})).obj
    assert plugin_of(picker_config(obj.spec))[0]["parameters"]["ttftTargetMs"] == 250.5


def test_no_target_no_plugin_the_fixed_limit_stays():
    obj = validate(doc({"maxBatchSize": 8})).obj
    config = picker_config(obj.spec)
    assert plugin_of(config) == []
    assert all(p["pluginRef"] != ADAPTIVE_LIMIT for s in config["schedulingProfiles"] for p in s["plugins"])


def test_a_two_role_fleet_has_the_one_plugin_in_both_profiles():
    spec = doc({"maxBatchSize": 8, "ttftTarget": "1s"})
    spec["spec"]["disaggregation"] = {"prefill": {}, "decode": {}}
    spec["spec"]["rules"] = []
    obj = validate(spec).obj
    config = picker_config(obj.spec)
    assert len(plugin_of(config)) == 1
    for profile in config["schedulingProfiles"]:
        assert ADAPTIVE_LIMIT in [p["pluginRef"] for p in profile["plugins"]], profile["name"]


BAD = {
    "target on a plain Service": ({"maxBatchSize": 8, "ttftTarget": "500ms"}, "service", "needs routing.mode inferencePool"),
    "target without maxBatchSize": ({"ttftTarget": "500ms"}, "inferencePool", "set maxBatchSize"),
    "min over max": ({"maxBatchSize": 4, "minBatchSize": 5, "ttftTarget": "1s"}, "inferencePool", "at most batching.maxBatchSize"),
    "min without a target": ({"maxBatchSize": 4, "minBatchSize": 2}, "inferencePool", "set batching.ttftTarget"),
    "min of zero": ({"maxBatchSize": 4, "minBatchSize": 0, "ttftTarget": "1s"}, "inferencePool", "minBatchSize"),
    "not a duration": ({"maxBatchSize": 4, "ttftTarget": "fast"}, "inferencePool", "not a duration"),
    "a zero target": ({"maxBatchSize": 4, "ttftTarget": "0ms"}, "inferencePool", "above zero"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_what_cannot_adapt_is_refused_by_the_operator_with_a_sentence(case):
    batching, mode, message = BAD[case]
    with pytest.raises(InvalidSpec) as error:
        validate(doc(batching, mode))
    assert any(message in problem for problem in error.value.problems), error.value.problems


# A zero target fits the duration pattern; only the operator, which reads the duration, refuses it.
@pytest.mark.parametrize("case", [c for c in BAD if c != "a zero target"])
def test_what_cannot_adapt_is_refused_by_the_crd(case):
    batching, mode, _ = BAD[case]
    assert api_server_errors(CRD, doc(batching, mode)), case


def test_the_crd_accepts_an_adaptive_pool():
    assert api_server_errors(CRD, doc({"maxBatchSize": 8, "minBatchSize": 2, "ttftTarget": "500ms"})) == []
