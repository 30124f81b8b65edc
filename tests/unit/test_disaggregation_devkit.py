"""The dev kit's P/D pieces that need no engine: the ExampleConnector flag and the reading of vLLM's counter."""

from __future__ import annotations

import json
import re
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


def test_an_ordinary_engine_has_no_kv_connector():
    """bench/pd's colocated engines: the same serve command, without the connector."""
    with_kv = tiny_serve_argv(VllmCpu(Path("/cache/env")), 8123, Path("/tmp/kv"))
    plain = tiny_serve_argv(VllmCpu(Path("/cache/env")), 8123, None)
    assert "--kv-transfer-config" not in plain and plain == with_kv[: len(plain)]
    assert len(with_kv) == len(plain) + 2


def test_the_kv_switch_points_the_decode_directory_elsewhere_in_one_step(tmp_path):
    from ascend_fleet_dev.real.kvproof import KVSwitch

    shared = tmp_path / "kv"
    shared.mkdir()
    (shared / "prompt-hash").mkdir()
    switch = KVSwitch(tmp_path / "switch")
    switch.point(shared)
    assert (switch.link / "prompt-hash").exists()
    switch.cut()
    assert switch.link.is_symlink() and not (switch.link / "prompt-hash").exists()
    assert list(switch.link.iterdir()) == []


def test_the_pair_is_scraped_with_the_labels_the_operator_queries():
    from types import SimpleNamespace

    from ascend_fleet.status.kv_transfer import DECODE_LEADER_PODS
    from ascend_fleet_dev.real.kvproof import FLEET_NAME, scrape_targets

    pair = SimpleNamespace(
        prefill=SimpleNamespace(host_port="127.0.0.1:1"), decode=SimpleNamespace(host_port="127.0.0.1:2")
    )
    prefill, decode = scrape_targets(pair)  # type: ignore[arg-type]
    assert decode.address == "127.0.0.1:2" and re.fullmatch(DECODE_LEADER_PODS, decode.labels["pod"])
    assert not re.fullmatch(DECODE_LEADER_PODS, prefill.labels["pod"])
    assert (
        decode.labels["inference"] == FLEET_NAME and decode.labels["namespace"] == prefill.labels["namespace"]
    )
    assert (prefill.labels["pd_role"], decode.labels["pd_role"]) == ("prefill", "decode")


def test_the_dev_fleets_targets_carry_the_pods_role():
    """As the chart's PodMonitor copies inference.ascendfleet.io/pd-role to pd_role, so do the dev fleet's targets."""
    from ascend_fleet.render import validate
    from ascend_fleet.render.children import render_all
    from ascend_fleet_dev.fleet.enginepods import engine_pod, scrape_target
    from tests.support.documents import inference

    split = {"prefill": {"parallelism": {"tensor": 4}}, "decode": {"parallelism": {"tensor": 2, "data": 2}}}
    two = inference("pd").engine("vllm-ascend").merge(disaggregation=split).build()
    one = inference("one").engine("vllm-ascend").build()
    roles = set()
    for doc in (two, one):
        for pod in (o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"):
            found = engine_pod(pod, now=0.0)
            assert found is not None
            roles.add((found.inference, scrape_target(found).labels.get("pd_role")))
    assert roles == {("pd", "prefill"), ("pd", "decode"), ("one", None)}


def test_a_routed_decode_pod_is_served_on_its_sidecars_port():
    """The InferencePool targets the sidecar's port on a routed decode leader: the simulated engine answers there;
    prefill pods and unrouted decode pods keep the engine's own port."""
    from ascend_fleet.render import validate
    from ascend_fleet.render.children import render_all
    from ascend_fleet_dev.fleet.enginepods import engine_pod
    from tests.support.documents import inference

    split = {"prefill": {"parallelism": {"tensor": 4}}, "decode": {"parallelism": {"tensor": 2, "data": 2}}}
    ports = {}
    for mode in ("inferencePool", "service"):
        doc = inference("pd").engine("vllm-ascend").merge(disaggregation=split).routing(mode).build()
        for pod in (o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"):
            found = engine_pod(pod, now=0.0)
            assert found is not None
            ports[(mode, found.pd_role)] = found.api_port
    assert ports == {
        ("inferencePool", "prefill"): 8000,
        ("inferencePool", "decode"): 8000,  # the sidecar's; the engine behind it is on 8200
        ("service", "prefill"): 8000,
        ("service", "decode"): 8000,
    }
