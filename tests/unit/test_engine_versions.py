"""Settings an image's engine release cannot run (refused) or runs without acting on (warned)."""

from __future__ import annotations

import pytest

from ascend_fleet.render import InvalidSpec, validate
from tests.support.documents import inference

SGLANG_0_5_7 = "lmsysorg/sglang:v0.5.7-cann8.3.rc1-910b"
SGLANG_0_5_10 = "lmsysorg/sglang:v0.5.10-cann8.3.rc1-910b"
SGLANG_0_5_12 = "lmsysorg/sglang:v0.5.12-cann8.3.rc1-910b"


def sglang(image: str, **delayer) -> dict:
    return (
        inference()
        .engine("sglang", image=image)
        .section("batching", prefillDelayer={"enabled": True, **delayer})
        .build()
    )


def refused(body: dict) -> list[str]:
    with pytest.raises(InvalidSpec) as error:
        validate(body)
    return error.value.problems


def test_the_prefill_delayer_needs_the_sglang_release_whose_parser_has_the_flag():
    (problem,) = refused(sglang(SGLANG_0_5_7))
    assert problem == (
        f"spec.batching.prefillDelayer: SGLang 0.5.7 (image {SGLANG_0_5_7}) has no --enable-prefill-delayer, so its "
        "launcher would refuse the flag and the pod would not start; use an image with SGLang 0.5.8 or newer"
    )
    assert validate(sglang(SGLANG_0_5_10))


def test_the_delayers_knobs_need_a_later_release_than_the_delayer_itself():
    (problem,) = refused(sglang(SGLANG_0_5_10, maxDelayMs=50))
    assert "SGLang 0.5.10" in problem and "--prefill-delayer-max-delay-ms/-queue-min-ratio" in problem
    assert problem.endswith("with SGLang 0.5.12 or newer, or leave out maxDelayMs and queueMinRatio")
    assert validate(sglang(SGLANG_0_5_12, maxDelayMs=50, queueMinRatio=0.5))


def test_short_request_first_on_vllm_ascend_warns_that_the_engine_ignores_it():
    body = inference().engine("vllm-ascend").section("scheduling", policy="short-request-first").build()
    (warning,) = [w for w in validate(body).warnings if w.startswith("spec.scheduling.policy")]
    assert "no vllm-ascend release up to 0.23.0 reads" in warning
    assert "use the routing classes" in warning
    fcfs = inference().engine("vllm-ascend").build()
    assert not [w for w in validate(fcfs).warnings if w.startswith("spec.scheduling.policy")]
