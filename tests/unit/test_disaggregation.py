"""Two-role fleets (spec.disaggregation): the models, their refusals, and the pods rendered per role."""

from __future__ import annotations

import json

import pytest

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.render.children import render_all
from ascend_fleet.render.validation import InvalidSpec, validate
from tests.support.documents import inference


def two_roles(engine: str = "vllm-ascend", chip: str = "ascend910b", name: str = "pd", **split) -> dict:
    disaggregation = {
        "prefill": {"parallelism": {"tensor": 4}},
        "decode": {"parallelism": {"tensor": 2, "data": 2}},
        **split,
    }
    return (
        inference(name)
        .engine(engine)
        .section("hardware", chip=chip)
        .merge(disaggregation=disaggregation)
        .build()
    )


def problems(doc: dict) -> str:
    with pytest.raises(InvalidSpec) as error:
        validate(doc)
    return "; ".join(error.value.problems)


def pods(doc: dict) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"}


def engine_container(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


def flag(pod: dict, name: str) -> str | None:
    command = engine_container(pod)["command"]
    return command[command.index(name) + 1] if name in command else None


def env(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in engine_container(pod)["env"]}


# ----- models and defaults -----


@pytest.mark.parametrize(
    ("engine", "chip", "connector", "port"),
    [
        ("vllm-ascend", "ascend910b", "MooncakeConnectorV1", 28000),
        ("vllm-ascend", "ascend910_93", "MooncakeConnectorV1", 36000),
        ("sglang", "ascend910b", "ascend", 8998),
    ],
)
def test_the_kv_transfer_defaults_follow_the_engine_and_the_chip(engine, chip, connector, port):
    kv = validate(two_roles(engine, chip)).obj.spec.disaggregation.kv_transfer
    assert (kv.connector, kv.port) == (connector, port)


def test_the_role_layouts_are_their_own():
    found = pods(two_roles())
    assert sorted(found) == ["pd-decode-0", "pd-decode-1", "pd-prefill-0"]
    assert flag(found["pd-prefill-0"], "--tensor-parallel-size") == "4"
    assert flag(found["pd-decode-1"], "--tensor-parallel-size") == "2"
    resources = engine_container(found["pd-decode-0"])["resources"]["limits"]
    assert resources["huawei.com/Ascend910"] == "2"


def test_a_multi_pod_role_names_its_workers_by_role_and_rank():
    doc = two_roles(prefill={"parallelism": {"tensor": 8, "pipeline": 2}})
    found = pods(doc)
    assert {"pd-prefill-0", "pd-prefill-0-1"} <= set(found)
    worker = found["pd-prefill-0-1"]
    assert env(worker)["LEADER_ADDRESS"].startswith("pd-prefill-0.pd-pods.")
    # One engine id per instance: its ranks share the leader's.
    ids = {json.loads(flag(p, "--kv-transfer-config"))["engine_id"] for p in (found["pd-prefill-0"], worker)}
    assert ids == {"pd-prefill-0"}


# ----- refusals -----


def test_a_port_in_vllm_ascends_own_range_is_refused():
    said = problems(two_roles(kvTransfer={"port": 27000}))
    assert "[20000, 28000)" in said and "28000 or above" in said


def test_the_reserved_range_grows_with_the_node():
    said = problems(two_roles(chip="ascend910_93", kvTransfer={"port": 30000}))
    assert "[20000, 36000)" in said


def test_a_port_whose_width_passes_65535_is_refused():
    said = problems(two_roles(kvTransfer={"port": 65533}))
    assert "past 65535" in said and "at most 65531" in said


def test_a_port_whose_width_takes_the_exporters_port_is_refused():
    doc = two_roles(kvTransfer={"port": 9406})
    doc["spec"]["engine"]["image"] = (
        "ghcr.io/ascend-fleet/vllm-ascend:0.1.0"  # runs the exporter on 9410; the widest role has 4 NPUs a pod
    )
    said = problems(doc)
    assert "9406 .. 9410" in said and "9410" in said and "exporter" in said


def test_an_unknown_connector_is_refused_with_the_engines_list():
    said = problems(two_roles(kvTransfer={"connector": "NixlConnector"}))
    assert "has no connector 'NixlConnector'" in said
    assert "MooncakeConnectorV1, MooncakeLayerwiseConnector or AscendStoreConnector" in said


def test_a_connector_of_the_other_engine_is_refused_naming_it():
    said = problems(two_roles("sglang", kvTransfer={"connector": "MooncakeConnectorV1"}))
    assert "vllm-ascend takes MooncakeConnectorV1" in said and "use ascend" in said


def test_prefill_tensor_below_decode_is_refused_where_the_connector_says_so():
    doc = two_roles(prefill={"parallelism": {"tensor": 2}}, decode={"parallelism": {"tensor": 4}})
    said = problems(doc)
    assert "prefill tensor 2 < decode tensor 4" in said
    # The layerwise connector has no such rule.
    doc["spec"]["disaggregation"]["kvTransfer"] = {"connector": "MooncakeLayerwiseConnector"}
    assert validate(doc).obj.spec.disaggregation.kv_transfer.connector == "MooncakeLayerwiseConnector"


def test_variants_and_spec_parallelism_beside_two_roles_are_refused():
    doc = two_roles()
    doc["spec"]["parallelism"] = {"data": 3}
    assert "spec.parallelism is unused with spec.disaggregation" in problems(doc)
    doc = two_roles()
    doc["spec"]["routing"] = {"mode": "inferencePool"}
    doc["spec"]["variants"] = [{"name": "int8", "precision": "int8"}]
    assert "spec.disaggregation and spec.variants do not go together" in problems(doc)


def test_user_args_cannot_replace_the_kv_transfer_flags():
    doc = two_roles()
    doc["spec"]["engine"]["args"] = ["--kv-transfer-config={}"]
    assert "repeats the generated '--kv-transfer-config" in problems(doc)
    doc = two_roles("sglang")
    doc["spec"]["engine"]["args"] = ["--disaggregation-mode", "decode"]
    assert "repeats the generated '--disaggregation-mode" in problems(doc)


def test_a_name_too_long_for_role_pods_is_refused():
    assert "at most 44" in problems(two_roles(name="a" * 45))


def test_the_crd_states_the_rules_it_can():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    messages = " ".join(
        r.get("message", "") for r in schema["properties"]["spec"]["x-kubernetes-validations"]
    )
    assert "kv_port >= 28000 on 8-NPU nodes, >= 36000 on 16-NPU nodes" in messages
    assert "SGLang (sglang) takes ascend" in messages
    assert "MooncakeConnectorV1 needs the prefill instances' tensor size" in messages
    assert any("spec.disaggregation" in r["rule"] for r in schema["x-kubernetes-validations"])


# ----- rendering -----


def test_vllm_pods_carry_the_kv_transfer_config_of_their_role():
    found = pods(two_roles())
    prefill = json.loads(flag(found["pd-prefill-0"], "--kv-transfer-config"))
    decode = json.loads(flag(found["pd-decode-1"], "--kv-transfer-config"))
    assert prefill["kv_role"] == "kv_producer" and decode["kv_role"] == "kv_consumer"
    assert prefill["kv_connector"] == decode["kv_connector"] == "MooncakeConnectorV1"
    assert prefill["kv_port"] == decode["kv_port"] == 28000
    assert (prefill["engine_id"], decode["engine_id"]) == ("pd-prefill-0", "pd-decode-1")
    sizes = {"prefill": {"dp_size": 1, "tp_size": 4}, "decode": {"dp_size": 1, "tp_size": 2}}
    assert prefill["kv_connector_extra_config"] == decode["kv_connector_extra_config"] == sizes


def test_vllm_pods_carry_the_hccl_environment_of_their_role():
    found = pods(two_roles())
    prefill, decode = env(found["pd-prefill-0"]), env(found["pd-decode-0"])
    assert (prefill["HCCL_BUFFSIZE"], decode["HCCL_BUFFSIZE"]) == ("256", "600")
    assert prefill["HCCL_IF_IP"] == "$(POD_IP)" and prefill["HCCL_SOCKET_IFNAME"] == "eth0"
    assert prefill["GLOO_SOCKET_IFNAME"] == "eth0"
    pod_ip = next(e for e in engine_container(found["pd-prefill-0"])["env"] if e["name"] == "POD_IP")
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_sglang_pods_carry_the_disaggregation_flags_and_the_store():
    found = pods(two_roles("sglang"))
    prefill, decode = found["pd-prefill-0"], found["pd-decode-0"]
    assert (
        flag(prefill, "--disaggregation-mode") == "prefill"
        and flag(decode, "--disaggregation-mode") == "decode"
    )
    assert flag(prefill, "--disaggregation-transfer-backend") == "ascend"
    assert flag(prefill, "--disaggregation-bootstrap-port") == "8998"
    assert flag(decode, "--disaggregation-bootstrap-port") is None
    store = "tcp://pd-prefill-0.pd-pods.$(POD_NAMESPACE).svc:24666"
    assert env(prefill)["ASCEND_MF_STORE_URL"] == env(decode)["ASCEND_MF_STORE_URL"] == store


def test_role_labels_on_every_pod_and_the_service_selects_decode_leaders():
    objects = render_all(validate(two_roles()).obj)
    for pod in (o for o in objects if o["kind"] == "Pod"):
        labels = pod["metadata"]["labels"]
        role = pod["metadata"]["name"].split("-")[1]
        assert labels[names.LABEL_PD_ROLE] == labels[names.LABEL_LLMD_ROLE] == role
        assert labels[names.LABEL_ROLE] == names.ROLE_LEADER  # leader/worker keeps its meaning
    service = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "pd")
    assert service["spec"]["selector"][names.LABEL_PD_ROLE] == names.PD_DECODE
    pdb = next(o for o in objects if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 3 - 1


def test_a_colocated_fleet_has_no_role_labels():
    objects = render_all(validate(inference("c").engine("vllm-ascend").build()).obj)
    for pod in (o for o in objects if o["kind"] == "Pod"):
        assert names.LABEL_PD_ROLE not in pod["metadata"]["labels"]
        assert "--kv-transfer-config" not in engine_container(pod)["command"]


def test_sglang_refuses_a_second_prefill_instance():
    doc = two_roles("sglang", prefill={"parallelism": {"tensor": 4, "data": 2}})
    assert "could not start; use one prefill instance" in problems(doc)
