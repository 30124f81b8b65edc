"""Rule windows are bounded: 24h in the CRD and pydantic, lower where the operator's control.maxWindow says."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ascend_fleet.api.checks import window_sentence
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.render import InvalidSpec, validate
from tests.support.corpus import cr, rule


def test_a_window_above_24h_is_refused_with_the_sentence():
    with pytest.raises(InvalidSpec) as refused:
        validate(cr(rules=[rule(**{"for": "24h1s"})]))
    assert refused.value.problems == [f"spec.rules.0: {window_sentence()}"]


def test_24h_is_accepted():
    assert validate(cr(rules=[rule(**{"for": "24h"})])).obj.spec.rules[0].for_ == 86400


def test_the_operator_can_lower_the_bound():
    settings = OperatorSettings.model_validate({"control": {"maxWindow": "1h"}})
    doc = cr(rules=[rule(**{"for": "30m"}), rule(**{"for": "2h"})])
    with pytest.raises(InvalidSpec) as refused:
        validate(doc, max_window=settings.control.max_window)
    assert refused.value.problems == [
        "spec.rules[1].for: for must be at most 1h: Prometheus evaluates a rule over every sample of its window, "
        "for every object, so a longer window costs it memory; write e.g. 5m or 2h"
    ]
    validate(doc)  # within the default bound


@pytest.mark.parametrize("bound", ["25h", 0])
def test_a_bound_outside_the_crd_is_refused_when_the_settings_load(bound):
    with pytest.raises(ValidationError, match="the CRD refuses rule windows above 24h"):
        OperatorSettings.model_validate({"control": {"maxWindow": bound}})


def test_default_bound_is_the_crd_bound():
    assert OperatorSettings().control.max_window == 86400
