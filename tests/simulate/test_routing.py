"""The simulator's routing policies: a Service's random choice, the picker's fewest outstanding, its classes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ascend_fleet.simulate.flow import ROUTINGS
from ascend_fleet.simulate.model import FleetConfig, simulate
from ascend_fleet.simulate.policies import StaticPolicy
from ascend_fleet.simulate.report import summarize
from ascend_fleet.simulate.traces import BUILT_IN, HOUR, generate


@pytest.fixture(scope="module")
def results():
    trace = generate(BUILT_IN["bursty"], 2 * HOUR, seed=3)
    config = FleetConfig(initial_replicas=4, min_replicas=4, max_replicas=4)
    return {
        mode: (trace, simulate(replace(config, routing=mode), trace, StaticPolicy(4))) for mode in ROUTINGS
    }


def test_the_picker_beats_random_choice(results):
    slow = {mode: summarize(result).slow_share for mode, (_, result) in results.items()}
    assert slow["service"] > 0.01  # random choice lets queues form behind busy replicas
    assert slow["pool"] < slow["service"] / 4
    assert all(summarize(result).failed == 0 for _, result in results.values())


def test_classes_serve_short_prompts_first(results):
    trace, pool = results["pool"]
    _, classes = results["classes"]

    def mean_first_token(result, keep) -> float:
        values = [result.first_token[i] for i, p in enumerate(trace.prompt_tokens) if keep(p)
                  and result.first_token[i] == result.first_token[i]]  # fmt: skip
        return sum(values) / len(values)

    short = lambda prompt: prompt <= 512  # noqa: E731
    long = lambda prompt: prompt > 2048  # noqa: E731
    assert mean_first_token(classes, short) < mean_first_token(pool, short)
    # The price: long prompts wait longer (strict priority, no aging in the model).
    assert mean_first_token(classes, long) > mean_first_token(pool, long)


def test_the_default_routing_is_the_picker():
    assert FleetConfig().routing == "pool"
