"""A rule's threshold is read in its metric's unit: a duration for a latency, a percentage for a ratio."""

from __future__ import annotations

import pytest
import yaml

from ascend_fleet.api.catalog import SECONDS, format_value
from ascend_fleet.api.policy import Rule
from ascend_fleet.render import InvalidSpec, validate
from tests.support.corpus import cr, rule


def test_a_latency_threshold_is_seconds_and_reads_back_as_written():
    parsed = Rule.model_validate(rule(metric="ttft_p99", threshold="500ms"))
    assert parsed.threshold == 0.5
    assert parsed.describe() == "ttft_p99 > 500ms for 5m -> scale_up"


def test_every_latency_entry_is_a_catalog_entry():
    from ascend_fleet.api.catalog import Catalog

    assert Catalog.build().names() >= SECONDS
    assert format_value("queue_time_p99", 2.0) == "2s"
    assert format_value("tpot_p99", 0.1) == "100ms"


@pytest.mark.parametrize(
    ("fields", "sentence"),
    [
        ({"threshold": "1s"}, "is a duration, but npu_utilization is a ratio"),
        ({"metric": "queue_depth", "threshold": "1s"}, "queue_depth is a count"),
        ({"metric": "ttft_p99", "threshold": "85%"}, "write a duration such as 1s or 500ms"),
        ({"metric": "tpot_p99", "threshold": "10%"}, "write a duration such as 1s or 500ms"),
        ({"metric": "queue_depth", "threshold": "50%"}, "queue_depth is a count"),
    ],
)
def test_a_threshold_in_the_wrong_unit_is_refused_with_what_fits(fields, sentence):
    with pytest.raises(InvalidSpec) as refused:
        validate(cr(rules=[rule(**fields)]))
    assert any(
        sentence in problem and problem.startswith("spec.rules") for problem in refused.value.problems
    ), refused.value.problems


def test_a_raw_query_takes_a_duration_as_seconds():
    raw = {"metric": None, "query": 'max by (namespace, inference) (up{namespace="x"})', "threshold": "250ms"}
    parsed = Rule.model_validate({k: v for k, v in rule(**raw).items() if v is not None})
    assert parsed.threshold == 0.25


def test_a_step_percentage_is_whole_percents():
    variants = [{"name": "fp16", "precision": "fp16"}, {"name": "int8", "precision": "int8"}]
    shift = rule(metric="ttft_p99", threshold="1s", action="shift_traffic", to="int8", step="12.5%")
    routed = {"mode": "inferencePool"}
    valid = validate(cr(engine="vllm-ascend", variants=variants, routing=routed, rules=[shift]))
    (parsed,) = valid.obj.spec.rules
    assert parsed.step == 13
    assert parsed.model_dump(by_alias=True)["step"] == 13


@pytest.mark.parametrize(
    "text",
    [
        "npu_utilization > 85% for 5m -> scale_up",
        "kv_cache_usage < 20% for 15m -> scale_down decode",
        "ttft_p99 >= 500ms for 2m -> scale_up prefill",
    ],
)
def test_a_rule_written_as_text_is_refused_with_the_object_it_reads_as(text):
    """The object the sentence proposes is itself a valid rule, and reads back as the text that was written."""
    with pytest.raises(InvalidSpec) as refused:
        validate(cr(rules=[text]))
    proposal = str(refused.value).split(" as ", 1)[1]
    obj = Rule.model_validate(yaml.safe_load(proposal))
    assert obj.describe() == text


def test_text_that_is_no_rule_is_refused_with_an_example_and_is_not_echoed_whole():
    with pytest.raises(
        InvalidSpec, match=r"a rule is an object, not the text 'x{80}\.\.\.': write it as \{metric"
    ):
        validate(cr(rules=["x" * 5000]))
