"""The benchmark client's command line and result, and the new spec.batching knobs on the engines' argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.render.engine import Rank, command
from ascend_fleet.tune.client import Load, bench_argv, parse_result
from ascend_fleet.tune.ladder import PREFILL_DELAYER_VARIANT, Rung
from tests.support.documents import example

DATA = Path(__file__).parent / "data"


def test_the_command_line_caps_concurrency_at_the_rung_and_names_the_served_model():
    argv = bench_argv("http://10.0.0.1:8000/", "qwen-7b", "sglang", Rung(32), Load(), Path("/tok"), Path("/o.jsonl"),
                      python="python3")  # fmt: skip
    assert argv[:3] == ["python3", "-m", "sglang.bench_serving"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--backend"] == "sglang-oai" and flags["--base-url"] == "http://10.0.0.1:8000"
    assert flags["--served-model-name"] == "qwen-7b" and flags["--tokenizer"] == "/tok"
    assert flags["--max-concurrency"] == "32" and flags["--num-prompts"] == "128"
    assert flags["--dataset-name"] == "random-ids" and flags["--request-rate"] == "64"
    assert bench_argv("u", "m", "vllm-ascend", Rung(4), Load(), Path("t"), Path("o"))[4] == "vllm"
    assert Load().prompts(4) == Load.min_prompts


def test_a_recorded_result_of_the_real_client_becomes_a_row():
    row = parse_result(
        (DATA / "bench_serving-0.5.5-batch32.jsonl").read_text(), Rung(32, PREFILL_DELAYER_VARIANT), 96
    )
    assert (row.batch_size, row.adaptive, row.completed, row.failed) == (32, "prefillDelayer", 96, 0)
    assert round(row.tokens_per_second) == 1104 and round(row.ttft_p50_ms) == 108
    assert round(row.ttft_p99_ms) == 464 and round(row.e2e_p99_ms) == 1171
    assert parse_result((DATA / "bench_serving-0.5.5-batch32.jsonl").read_text(), Rung(32), 100).failed == 4


def spec(engine: str, batching: dict) -> dict:
    return example("sglang-small.yaml").engine(engine).spec(batching=batching).build()


def argv_of(doc: dict) -> list[str]:
    valid = validate(doc)
    return command(valid.obj.spec, valid.layout, Rank(0, 0, valid.layout.pods_per_replica))


def test_adaptive_knobs_reach_each_engine_in_its_own_spelling():
    sglang = argv_of(
        spec(
            "sglang", {"chunkedPrefill": False, "prefillDelayer": {"maxDelayMs": 2000, "queueMinRatio": 0.3}}
        )
    )
    assert " ".join(sglang).endswith(
        "--chunked-prefill-size -1 --enable-prefill-delayer "
        "--prefill-delayer-max-delay-ms 2000 --prefill-delayer-queue-min-ratio 0.3"
    )
    assert "--enable-prefill-delayer" not in argv_of(spec("sglang", {"prefillDelayer": {"enabled": False}}))
    assert "--chunked-prefill-size" not in argv_of(spec("sglang", {"chunkedPrefill": True}))
    assert "--no-enable-chunked-prefill" in argv_of(spec("vllm-ascend", {"chunkedPrefill": False}))
    assert "--enable-chunked-prefill" in argv_of(spec("vllm-ascend", {"chunkedPrefill": True}))
    assert not any("chunked" in word for word in argv_of(spec("vllm-ascend", {})))


def test_the_prefill_delayer_on_vllm_is_refused_with_what_would_fit():
    with pytest.raises(InvalidSpec) as error:
        validate(spec("vllm-ascend", {"prefillDelayer": {}}))
    assert "vllm-ascend has none: remove it, or use engine.type sglang" in " ".join(error.value.problems)


def test_the_crd_refuses_the_prefill_delayer_on_vllm_and_accepts_it_on_sglang():
    from ascend_fleet.api.crd import crd
    from tests.support.crdcheck import api_server_errors

    definition = crd()
    refused = api_server_errors(definition, spec("vllm-ascend", {"prefillDelayer": {"maxDelayMs": 500}}))
    assert any("vllm-ascend has none" in error for error in refused), refused
    assert api_server_errors(definition, spec("sglang", {"prefillDelayer": {"maxDelayMs": 500},
                                                         "chunkedPrefill": False})) == []  # fmt: skip
