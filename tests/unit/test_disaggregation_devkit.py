"""The dev kit's P/D pieces that need no engine: the ExampleConnector flag and the reading of vLLM's counter."""

from __future__ import annotations

import json
from pathlib import Path

from ascend_fleet_dev.real.disaggregation import (
    KV_CONNECTOR,
    SOURCE_COMPUTED,
    SOURCE_TRANSFERRED,
    kv_transfer_config,
    prompt_tokens_by_source,
    tiny_serve_argv,
)
from ascend_fleet_dev.real.vllm_env import VllmCpu

# The counter in the exposition format of vLLM 0.32's /metrics (its sample lines as the engine writes them), with
# a second engine of the same server and another family beside it.
METRICS = """\
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 110.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 0.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="external_kv_transfer"} 256.0
vllm:prompt_tokens_by_source_total{engine="1",model_name="tiny",source="external_kv_transfer"} 128.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 366.0
"""


def test_the_counter_is_summed_by_source_and_other_families_ignored():
    assert prompt_tokens_by_source(METRICS) == {
        SOURCE_COMPUTED: 110.0,
        "local_cache_hit": 0.0,
        SOURCE_TRANSFERRED: 384.0,
    }
    assert prompt_tokens_by_source("") == {}


def test_both_engines_get_example_connector_over_the_given_directory(tmp_path):
    config = json.loads(kv_transfer_config(tmp_path / "kv"))
    assert config == {
        "kv_connector": KV_CONNECTOR,
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"shared_storage_path": str(tmp_path / "kv")},
    }
    argv = tiny_serve_argv(VllmCpu(Path("/cache/env")), 8123, tmp_path / "kv")
    flags = dict(zip(argv, argv[1:], strict=False))
    assert json.loads(flags["--kv-transfer-config"]) == config
    assert flags["--port"] == "8123" and flags["--host"] == "127.0.0.1" and flags["--dtype"] == "float32"
