"""A two-role fleet behind an InferencePool: the picker's P/D profiles, llm-d's sidecar in the decode leaders
in front of an engine moved to its own port, prefill pods unchanged, and the ports the sidecar needs checked."""

from __future__ import annotations

import yaml

from ascend_fleet.api import names
from ascend_fleet.api.disaggregation import DEFAULT_PD_SIDECAR_IMAGE
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.render.children import render_all
from ascend_fleet.render.metadata import Owner
from ascend_fleet.render.pdsidecar import PD_SIDECAR_CONTAINER
from ascend_fleet.render.picker_config import picker_config
from ascend_fleet.render.routing import PICKER_CONFIG_FILE
from ascend_fleet.render.validation import validate
from tests.unit.test_disaggregation import engine_container, flag, problems, two_roles


def routed(engine: str = "vllm-ascend", chip: str = "ascend910b", **engine_fields) -> dict:
    doc = two_roles(engine, chip)
    doc["spec"]["routing"] = {"mode": "inferencePool"}
    doc["spec"]["engine"].update(engine_fields)
    return doc


def objects(doc: dict) -> list[dict]:
    return render_all(validate(doc).obj)


def pods(doc: dict) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects(doc) if o["kind"] == "Pod"}


def test_decode_leaders_run_the_sidecar_in_front_of_their_engine():
    rendered = pods(routed())
    decode = rendered["pd-decode-0"]
    engine, sidecar = decode["spec"]["containers"]
    assert sidecar["name"] == PD_SIDECAR_CONTAINER and sidecar["image"] == DEFAULT_PD_SIDECAR_IMAGE
    assert sidecar["args"] == [
        "-port",
        "8000",
        "-vllm-port",
        "8200",
        "-connector",
        "nixlv2",
        "-secure-proxy=false",
    ]
    assert sidecar["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    # The engine moved to the sidecar's engine port: its flag, its port's name and its probes follow.
    assert flag(decode, "--port") == "8200"
    assert {p["name"]: p["containerPort"] for p in engine["ports"]}["engine"] == 8200
    assert all(
        engine[p]["httpGet"]["port"] == "engine" for p in ("startupProbe", "readinessProbe", "livenessProbe")
    )
    # Prefill pods keep the engine on the pool's port: the picker's header names that port.
    prefill = rendered["pd-prefill-0"]
    assert [c["name"] for c in prefill["spec"]["containers"]] == ["engine"]
    assert flag(prefill, "--port") == "8000"
    assert {p["name"] for p in engine_container(prefill)["ports"]} >= {"http"}


def test_without_routing_no_sidecar():
    for pod in pods(two_roles()).values():
        assert [c["name"] for c in pod["spec"]["containers"]] == ["engine"]
        assert flag(pod, "--port") == "8000"


def test_sglang_decode_pods_get_the_sglang_protocol():
    decode = pods(routed("sglang", "ascend910_93"))["pd-decode-0"]
    sidecar = decode["spec"]["containers"][1]
    assert sidecar["args"][sidecar["args"].index("-connector") + 1] == "sglang"
    assert flag(decode, "--port") == "30200"


def test_the_pool_targets_the_sidecar_and_prefill_port_and_selects_both_roles():
    rendered = objects(routed())
    pool = next(o for o in rendered if o["kind"] == "InferencePool")
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert names.LABEL_PD_ROLE not in pool["spec"]["selector"]["matchLabels"]  # prefill pods are in the pool
    config = yaml.safe_load(next(o for o in rendered if o["kind"] == "ConfigMap")["data"][PICKER_CONFIG_FILE])
    obj = validate(routed()).obj
    assert config == picker_config(obj.spec, Owner.of(obj))  # with the classifier: the example has classes
    profiles = {p["name"]: [r["pluginRef"] for r in p["plugins"]] for p in config["schedulingProfiles"]}
    assert list(profiles) == ["decode", "prefill"]
    assert profiles["decode"][0] == "decode-filter"
    # Prefill: its role, then only the pods of the chosen decode pod's revision.
    assert profiles["prefill"][:2] == ["prefill-filter", "pd-pair-filter"]
    assert profiles["decode"][1:] == profiles["prefill"][2:]  # each the usual profile behind its filters
    filters = {p["name"]: p["parameters"] for p in config["plugins"] if p["type"] == "pd-role-filter"}
    assert filters == {
        "decode-filter": {"label": names.LABEL_LLMD_ROLE, "roles": ["decode"]},
        "prefill-filter": {"label": names.LABEL_LLMD_ROLE, "roles": ["prefill"]},
    }
    (pair,) = (p for p in config["plugins"] if p["type"] == "pd-pair-filter")
    assert pair["parameters"] == {"label": names.LABEL_REVISION}
    assert {"pd-profile-handler", "prefill-header-handler"} <= {p["type"] for p in config["plugins"]}


def test_a_colocated_routed_fleet_keeps_one_profile():
    doc = two_roles()
    del doc["spec"]["disaggregation"]
    doc["spec"]["routing"] = {"mode": "inferencePool"}
    config = picker_config(validate(doc).obj.spec)
    assert [p["name"] for p in config["schedulingProfiles"]] == ["default"]


def test_the_sidecar_engine_port_must_be_free():
    assert "past 65535" in problems(routed(port=65400))
    # 8000 + 200 = 8200 against the exporter's 9410 is fine; an engine on 9210 would land on it.
    exporter = problems(routed(port=9210, image="ascend-fleet/vllm:1"))
    assert "9210 + 200 = 9410" in exporter
    kv = problems(routed(port=27801))
    assert "inside the KV transfer's ports" in kv


def test_the_operator_fills_in_its_sidecar_image():
    settings = OperatorSettings.model_validate(
        {"routing": {"pdSidecarImage": "registry.example/pd-sidecar:1"}}
    )
    doc = settings.with_default_image(routed())
    decode = pods(doc)["pd-decode-0"]
    assert decode["spec"]["containers"][1]["image"] == "registry.example/pd-sidecar:1"
    own = routed()
    own["spec"]["disaggregation"]["sidecarImage"] = "mine:2"
    assert settings.with_default_image(own)["spec"]["disaggregation"]["sidecarImage"] == "mine:2"


def test_both_roles_carry_one_revision_the_picker_pairs_by():
    """The pair filter compares the decode and prefill pods' revision label: equal only for pods of one spec."""

    def revisions(doc: dict) -> dict[str, str]:
        return {name: pod["metadata"]["labels"][names.LABEL_REVISION] for name, pod in pods(doc).items()}

    before = revisions(routed())
    assert sorted(before) == ["pd-decode-0", "pd-decode-1", "pd-prefill-0"]
    (rev,) = set(before.values())  # one value over both roles: pods of one spec pair
    prefill_changed = routed()
    prefill_changed["spec"]["disaggregation"]["prefill"]["parallelism"]["tensor"] = 8
    image_changed = routed(image="engine:v2")
    decode_scaled = routed()
    decode_scaled["spec"]["disaggregation"]["decode"]["parallelism"]["data"] = 3
    for changed in (prefill_changed, image_changed):
        after = set(revisions(changed).values())
        assert len(after) == 1 and after != {rev}  # a new spec: no pod of it pairs with an old one
    assert set(revisions(decode_scaled).values()) == {rev}  # scaling a role keeps the pairs
