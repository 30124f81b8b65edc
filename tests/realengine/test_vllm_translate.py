"""The one translation of a vllm-ascend pod's engine command into a ``vllm serve`` a CPU host runs."""

from __future__ import annotations

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet_dev.real.realengines import downward_values
from ascend_fleet_dev.real.tinymodel import MAX_POSITIONS
from ascend_fleet_dev.real.vllm_engine import (
    COMPILE_CACHE,
    COMPILE_CACHE_ENV,
    DEFAULT_KV_CACHE_BYTES,
    DROPPED,
    ONE_PROCESS,
    NotAnEngine,
    options,
    translate,
)
from tests.support.paths import ROOT

from .support import FIELD_VALUES, engine_container, example_vllm_pods, render

MODEL = "/cache/tiny"
KEPT = ("--served-model-name", "--max-num-seqs", "--max-num-batched-tokens", "--scheduling-policy")


def flags(argv: list[str]) -> dict[str, str | None]:
    return dict(options(argv[3:]))


def pod_flags(container: dict) -> dict[str, str | None]:
    argv = [*container["command"], *container.get("args", [])]
    return dict(options(argv[3:]))


def leaders() -> list[tuple[str, dict]]:
    return [
        (name, pod)
        for name, pod in example_vllm_pods()
        if "--headless" not in pod_flags(engine_container(pod))
    ]


def test_the_examples_render_vllm_leaders_and_workers():
    assert len(leaders()) >= 5
    assert len(example_vllm_pods()) > len(leaders())  # the multi-pod examples have headless ranks


@pytest.mark.parametrize("name,pod", leaders(), ids=[name for name, _ in leaders()])
def test_an_example_leader_becomes_a_cpu_server_of_the_tiny_model(name, pod):
    container = engine_container(pod)
    served = translate(container, model=MODEL, field_values=FIELD_VALUES, host="127.0.0.1", port=18000)
    argv = served.argv
    assert argv[:3] == ["vllm", "serve", MODEL]
    found, original = flags(argv), pod_flags(container)
    assert not set(found) & DROPPED
    assert {found[flag] for flag in ONE_PROCESS if flag in found} <= {"1"}
    assert found["--dtype"] == "float32" and argv.count("--dtype") == 1
    assert found["--kv-cache-memory-bytes"] == str(DEFAULT_KV_CACHE_BYTES)
    assert (found["--host"], found["--port"]) == ("127.0.0.1", "18000")
    for flag in KEPT:
        assert found.get(flag) == original.get(flag), flag
    if "--max-model-len" in original:
        assert int(found["--max-model-len"]) == min(int(original["--max-model-len"] or 0), MAX_POSITIONS)
    if "--additional-config" in original:  # vllm-ascend's scheduler settings: vLLM takes and ignores them
        assert found["--additional-config"] == original["--additional-config"]
    assert served.env["HF_HUB_OFFLINE"] == "1"
    assert served.env["POD_NAME"] == FIELD_VALUES["metadata.name"]
    assert any(change.startswith("model path /models/") for change in served.changes)


def test_headless_ranks_start_no_engine():
    workers = [pod for _, pod in example_vllm_pods() if "--headless" in pod_flags(engine_container(pod))]
    assert workers
    for pod in workers:
        with pytest.raises(NotAnEngine, match="headless"):
            translate(engine_container(pod), model=MODEL, field_values=FIELD_VALUES)


def test_a_ray_leader_is_unwrapped_and_a_ray_worker_starts_no_engine():
    doc = yaml.safe_load((ROOT / "examples" / "vllm-volcano-gang.yaml").read_text())
    doc["spec"]["engine"]["multiNode"] = "ray"
    pods = [o for o in render(text=yaml.safe_dump(doc)) if o["kind"] == "Pod"]
    by_rank = {pod["metadata"]["labels"][names.LABEL_RANK]: pod for pod in pods}
    leader = engine_container(by_rank["0"])
    assert leader["command"][:2] == ["/bin/bash", "-c"] and "ray start --head" in leader["command"][2]
    served = translate(leader, model=MODEL, field_values=FIELD_VALUES)
    assert served.argv[:3] == ["vllm", "serve", MODEL]
    assert "--distributed-executor-backend" not in served.argv
    with pytest.raises(NotAnEngine, match="Ray worker"):
        translate(engine_container(by_rank["1"]), model=MODEL, field_values=FIELD_VALUES)


def test_other_spellings_and_environment_are_translated_too():
    container = {
        "command": ["vllm", "serve"],
        "args": [
            "--model=/models/m",
            "-tp",
            "8",
            "--quantization=ascend",
            "--max-num-seqs",
            "4",
            "--port=$(PORT)",
        ],
        "env": [
            {"name": "PORT", "value": "8001"},
            {"name": "ASCEND_FLEET_EXPORTER_PORT", "value": "9410"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "WHERE", "value": "$(IP):$(PORT) $$(PORT)"},
        ],
    }
    served = translate(container, model=MODEL, field_values=FIELD_VALUES, exporter_port=19410)
    assert served.argv == [
        "vllm",
        "serve",
        MODEL,
        "-tp",
        "1",
        "--max-num-seqs",
        "4",
        "--port",
        "8001",
        "--dtype",
        "float32",
        "--kv-cache-memory-bytes",
        str(DEFAULT_KV_CACHE_BYTES),
    ]
    assert served.env["WHERE"] == "127.0.0.1:8001 $(PORT)"
    assert served.env["ASCEND_FLEET_EXPORTER_PORT"] == "19410"


def test_the_compile_cache_moves_to_the_hosts_temp_dir():
    """spec.engine.compilation.cacheDir is a volume the pod mounts; the host gets a folder of its own."""
    pod = next(pod for name, pod in example_vllm_pods() if name.startswith("vllm-compiled"))
    container = engine_container(pod)
    assert {"name": COMPILE_CACHE_ENV, "value": "/var/cache/compile"} in container["env"]
    served = translate(container, model=MODEL, field_values=FIELD_VALUES)
    assert served.env[COMPILE_CACHE_ENV] == COMPILE_CACHE
    assert any(change.startswith(f"{COMPILE_CACHE_ENV} /var/cache/compile -> ") for change in served.changes)
    assert "--compilation-config" in flags(served.argv)  # the graph settings reach the CPU server as written
    assert f"`{COMPILE_CACHE_ENV}`" in (ROOT / "docs" / "real-cluster.md").read_text()


def test_a_label_reaches_the_server_through_a_field_ref_as_a_kubelet_gives_it():
    """``metadata.labels['KEY']`` and ``metadata.annotations['KEY']`` as the kubelet resolves them (a user can
    hand an engine its replica index this way); a label the pod lacks leaves the variable unset."""
    pod = {
        "metadata": {"name": "tiny-1", "labels": {names.LABEL_REPLICA: "1"}, "annotations": {"a": "b"}},
        "status": {"podIP": "127.0.0.9"},
    }
    container = {
        "command": ["vllm", "serve", "/models/m"],
        "env": [
            {
                "name": "CORE",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{names.LABEL_REPLICA}']"}},
            },
            {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a']"}}},
            {"name": "NONE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['absent']"}}},
        ],
    }
    env = translate(container, model=MODEL, field_values=downward_values(pod)).env
    assert (env["CORE"], env["NOTE"]) == ("1", "b") and "NONE" not in env


def test_a_container_that_is_not_vllm_is_refused():
    with pytest.raises(NotAnEngine, match="does not run vllm serve"):
        translate({"command": ["python3", "-m", "sglang.launch_server"]}, model=MODEL, field_values={})


def test_every_translated_flag_is_listed_in_the_docs():
    text = (ROOT / "docs" / "real-cluster.md").read_text()
    for flag in sorted(
        DROPPED | ONE_PROCESS | {"--dtype", "--max-model-len", "--kv-cache-memory-bytes", "--headless"}
    ):
        assert f"`{flag}`" in text, flag
