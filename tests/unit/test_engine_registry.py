"""The engine registry: production selection is closed over EngineType; a test registers a third engine.

The fake engine below lives in this file only. Validating and rendering a fleet with it goes through the
shared api and render modules unchanged, which is what "adding an engine touches only the engine's files"
means in practice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.catalog import PRESET_ASCEND_FLEET, PRESETS
from ascend_fleet.api.crd import crd
from ascend_fleet.engines import (
    EngineFacts,
    EngineRenderer,
    EngineType,
    Flag,
    Rank,
    UnknownEngine,
    engine_for,
    registered,
)
from ascend_fleet.engines.base import Metrics, Release, Spelling, shared_flags
from ascend_fleet.engines.registry import builtin, builtin_facts, engine_types
from ascend_fleet.render import InvalidSpec, render_all, validate

FAKE_PORT = 7000
FAKE_RENDEZVOUS = 7100

FAKE_FACTS = EngineFacts(
    type="fake-llm",
    label="FakeLLM",
    default_port=FAKE_PORT,
    chips=("ascend910b",),
    chip_support="fake-llm supports Atlas A2 (ascend910b) only",
    releases=(Release("example.com/fake-llm:v2.0.0", "2.0.0", "9.1.0", ("ascend910b",)),),
    metrics=Metrics(
        queue_depth="fake:waiting",
        running_requests="fake:running",
        kv_cache_usage="fake:kv",
        ttft_histogram="fake:ttft_seconds",
        queue_time_histogram="fake:queue_seconds",
        e2e_latency_histogram="fake:e2e_seconds",
        tpot_histogram="fake:tpot_seconds",
    ),
    spelling=Spelling("fake-int8", "--batch", "--batch-tokens", "--context"),
    aliases={"--tp": ("--tensor",)},
    underscores=False,
    tune_backend="openai",
    picker_engine="fake",
    health_path="/healthz",
)


class FakeEngine(EngineRenderer):
    """``fake-serve``: one flag per setting, a rendezvous port on the leader, one variable of its own."""

    facts = FAKE_FACTS

    def flags(self, spec, layout, at: Rank) -> list[Flag]:
        flags = [
            Flag("--port", str(spec.engine.port), "spec.engine.port"),
            Flag("--tp", str(layout.tensor), "spec.parallelism.tensor"),
        ]
        flags += shared_flags(spec, FAKE_FACTS.spelling)
        if layout.multi_pod:
            flags.append(Flag("--rank", str(at.rank), "the pod's rank"))
        return flags

    def command(self, spec, layout, at: Rank, exporter: bool) -> list[str]:
        return ["fake-serve", spec.model.path, *self.argv(spec, layout, at)]

    def env(self, spec, layout) -> list[dict]:
        return [{"name": "FAKE_LLM", "value": "1"}]

    def leader_ports(self, spec) -> list[dict]:
        return [{"name": "dist-init", "containerPort": FAKE_RENDEZVOUS, "protocol": "TCP"}]

    def version_problems(self, spec, layout, image: str) -> list[str]:
        if self.facts.image_version(image) < (2, 0, 0):
            return [f"spec.engine.image: {image} carries FakeLLM older than 2.0.0"]
        return []


@pytest.fixture
def fake_engine() -> Iterator[EngineRenderer]:
    with registered(FakeEngine()) as engine:
        yield engine
    assert "fake-llm" not in engine_types(), "the fake engine outlived its test"


def fleet(engine_type: str = "fake-llm", **spec) -> dict:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": "llm", "namespace": "default", "uid": "u-1"},
        "spec": {
            "model": {"name": "m", "path": "/models/m"},
            "engine": {"type": engine_type},
            **spec,
        },
    }


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def test_every_engine_type_has_its_production_engine():
    for engine_type in get_args(EngineType):
        assert builtin(engine_type).facts.type == engine_type
        assert engine_for(engine_type).facts.type == engine_type
    assert [f.type for f in builtin_facts()] == list(get_args(EngineType))


def test_an_unregistered_type_is_refused_in_the_api_and_the_registry():
    with pytest.raises(InvalidSpec, match="'vllm-ascend' or 'sglang'"):
        validate(fleet())
    with pytest.raises(UnknownEngine):
        engine_for("fake-llm")


def test_a_fleet_of_a_registered_engine_validates_and_renders(fake_engine):
    valid = validate(fleet(parallelism={"tensor": 8, "pipeline": 2}, precision="int8"))
    assert valid.obj.spec.engine.port == FAKE_PORT
    assert valid.obj.spec.image() == "example.com/fake-llm:v2.0.0"
    objects = render_all(valid.obj)
    leader, worker = by_kind(objects, "Pod")[:2]
    container = leader["spec"]["containers"][0]
    assert container["command"] == [
        "fake-serve", "/models/m", "--port", "7000", "--tp", "8", "--quantization", "fake-int8", "--rank", "0",
    ]  # fmt: skip
    assert worker["spec"]["containers"][0]["command"][-2:] == ["--rank", "1"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FAKE_LLM"] == "1"
    assert env["LEADER_ADDRESS"] == "llm-0.llm-pods.$(POD_NAMESPACE).svc"
    assert {"name": "dist-init", "containerPort": FAKE_RENDEZVOUS, "protocol": "TCP"} in container["ports"]
    assert {"name": "http", "containerPort": FAKE_PORT, "protocol": "TCP"} in container["ports"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert "readinessProbe" not in worker["spec"]["containers"][0]
    service = next(o for o in by_kind(objects, "Service") if o["metadata"]["name"] == "llm")
    assert service["spec"]["ports"][0]["port"] == FAKE_PORT


def test_the_registered_engines_facts_drive_the_shared_checks(fake_engine):
    conflict = validate_problems(fleet(engine={"type": "fake-llm", "args": ["--tensor=2"]}))
    assert any("'--tensor=2' repeats the generated '--tp 1'" in p for p in conflict), conflict
    chip = validate_problems(fleet(hardware={"chip": "ascend910_93"}))
    assert any("fake-llm supports Atlas A2 (ascend910b) only" in p for p in chip), chip
    old = validate_problems(fleet(engine={"type": "fake-llm", "image": "example.com/fake-llm:v1.0.0"}))
    assert old == ["spec.engine.image: example.com/fake-llm:v1.0.0 carries FakeLLM older than 2.0.0"]
    delayer = validate_problems(fleet(batching={"prefillDelayer": {"enabled": True}}))
    assert any("prefillDelayer" in p for p in delayer), delayer


def test_the_picker_reads_the_registered_engines_metrics(fake_engine):
    routed = fleet(routing={"mode": "inferencePool", "classes": [{"name": "all", "priority": 0}]})
    config_map = by_kind(render_all(validate(routed).obj), "ConfigMap")[0]
    config = yaml.safe_load(next(iter(config_map["data"].values())))
    extractor = next(p for p in config["plugins"] if p["type"] == "core-metrics-extractor")
    assert extractor["parameters"] == {"defaultEngine": "fake"}


def test_registering_a_production_type_again_is_refused():
    with pytest.raises(ValueError, match="registered already"), registered(engine_for("sglang")):
        pass
    assert engine_for("sglang").facts.type == "sglang"


def test_the_catalog_and_the_crd_list_the_production_engines_only(fake_engine):
    queue_depth = PRESETS[PRESET_ASCEND_FLEET]["queue_depth"]
    assert "vllm:num_requests_waiting" in queue_depth and "fake:waiting" not in queue_depth
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    engine_type = schema["properties"]["spec"]["properties"]["engine"]["properties"]["type"]
    assert engine_type["enum"] == list(get_args(EngineType))


def validate_problems(doc: dict) -> list[str]:
    try:
        validate(doc)
    except InvalidSpec as error:
        return error.problems
    return []
