"""A real vLLM (its CPU build) serving the tiny model from a rendered example pod, with the exporter plugin.

The pod is the leader of ``examples/vllm-volcano-gang.yaml`` (this project's engine image, so the exporter is
on), translated by :func:`ascend_fleet_dev.real.vllm_engine.translate`. Skipped when ``make
engine-vllm`` has not built the environment; under ``CI=true`` that is a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ascend_fleet.api import names
from ascend_fleet_dev.real.vllm_engine import translate
from ascend_fleet_dev.real.vllm_env import install_plugin
from ascend_fleet_exporter import metrics
from tests.exporter.support import free_port

from .server import VllmServer, http
from .support import FIELD_VALUES, engine_container, example_vllm_pods, vllm_cpu_or_skip

pytestmark = pytest.mark.timeout(900)
EXAMPLE = "vllm-volcano-gang"
NO_NPU_LINE = "torch_npu is not installed in this engine's environment"


def leader_pod() -> dict:
    return next(
        pod
        for name, pod in example_vllm_pods()
        if name.startswith(f"{EXAMPLE}/") and pod["metadata"]["labels"][names.LABEL_RANK] == "0"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[VllmServer, int, str]]:
    built = vllm_cpu_or_skip()
    install_plugin(built)
    container = engine_container(leader_pod())
    port, exporter_port = free_port(), free_port()
    served = translate(
        container,
        model=str(built.model),
        field_values=FIELD_VALUES,
        host="127.0.0.1",
        port=port,
        exporter_port=exporter_port,
        vllm=str(built.vllm),
    )
    work = tmp_path_factory.mktemp("vllm")
    env = {**served.env, "ASCEND_FLEET_EXPORTER_DIR": str(work / "spool")}
    model_name = dict(zip(served.argv, served.argv[1:], strict=False))["--served-model-name"]
    running = VllmServer(served.argv, env, work / "vllm.log", port).start()
    try:
        seconds = running.wait_healthy()
        print(f"vllm serve healthy after {seconds:.0f} s, {running.rss_bytes() / 2**30:.1f} GiB RSS")
        yield running, exporter_port, model_name
    finally:
        running.stop()


def test_the_exporter_is_on_in_the_example_pod():
    env = {e["name"]: e.get("value") for e in engine_container(leader_pod())["env"]}
    assert env["ASCEND_FLEET_EXPORTER"] == "1"


def test_version_is_vllm_itself(server):
    running, _, _ = server
    status, text = http("GET", f"{running.url}/version")
    assert status == 200, text
    assert json.loads(text)["version"].startswith("0.32.0")


def test_a_completion_is_answered(server):
    running, _, model = server
    status, text = http(
        "POST",
        f"{running.url}/v1/completions",
        {"model": model, "prompt": "Hello, how are you today?", "max_tokens": 8, "temperature": 0},
    )
    assert status == 200, text
    answer = json.loads(text)
    assert answer["model"] == model and isinstance(answer["choices"][0]["text"], str)
    assert 1 <= answer["usage"]["completion_tokens"] <= 8


def test_a_chat_completion_is_answered(server):
    running, _, model = server
    messages = [{"role": "user", "content": "What is a fleet of engines?"}]
    status, text = http(
        "POST", f"{running.url}/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 8}
    )
    assert status == 200, text
    answer = json.loads(text)
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert 1 <= answer["usage"]["completion_tokens"] <= 8


def test_an_unknown_model_is_refused_by_the_server(server):
    running, _, _ = server
    status, _ = http(
        "POST", f"{running.url}/v1/completions", {"model": "absent", "prompt": "x", "max_tokens": 1}
    )
    assert status == 404


def test_vllms_own_series_are_on_metrics(server):
    running, _, _ = server
    http("POST", f"{running.url}/v1/completions", {"model": server[2], "prompt": "Count", "max_tokens": 2})
    status, text = http("GET", f"{running.url}/metrics")
    assert status == 200
    families = {
        family.name for family in text_string_to_metric_families(text) if family.name.startswith("vllm:")
    }
    assert {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_time_per_output_token_seconds",  # the catalog's tpot_p99
    } <= families
    assert len(families) >= 20
    successes = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:request_success_total"
    ]
    assert sum(successes) >= 1


def test_the_exporter_says_there_is_no_npu_once(server):
    running, exporter_port, _ = server
    status, text = http("GET", f"http://127.0.0.1:{exporter_port}/metrics")
    assert status == 200, text
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert [(s.name, s.labels, s.value) for s in samples] == [
        (metrics.EXPORTER_INFO, {"backend": metrics.BACKEND_NONE}, 1.0)
    ]
    assert running.log.read_text(errors="replace").count(NO_NPU_LINE) == 1
