"""The dev cluster's gateway follows the pool and honours the picker's fallbacks.

Envoy's own handling of the configuration (a dead first endpoint retried on the next) is checked with the real
picker in tests/routing/test_dataplane.py; here, what the derivation and the configuration say.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_fleet.kube import KubeError, wait_for
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.render.picker_config import picker_config
from ascend_fleet_dev.real.dataplane import Envoy
from ascend_fleet_dev.real.envoyconfig import envoy_config, picker_fallbacks
from ascend_fleet_dev.real.poolendpoints import (
    FollowedEndpoints,
    PoolEndpoints,
    PoolRef,
    eds_document,
    pool_addresses,
    pool_endpoints,
)
from tests.support.documents import inference

POOL = {
    "spec": {
        "selector": {"matchLabels": {"app": "llm", "serving": "true"}},
        "targetPorts": [{"number": 8000}],
    }
}


def pod(
    name: str, ip: str, *, ready: bool = True, labels: dict | None = None, deleting: bool = False
) -> dict:
    metadata: dict = {"name": name, "labels": {"app": "llm", "serving": "true"} if labels is None else labels}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    status = {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": metadata, "status": status}


def test_the_pool_endpoints_are_its_ready_selected_pods_not_being_deleted():
    pods = [
        pod("a", "127.0.1.2"),
        pod("b", "127.0.1.1"),
        pod("not-ready", "127.0.1.3", ready=False),
        pod("drained", "127.0.1.4", labels={"app": "llm", "serving": "false"}),
        pod("deleting", "127.0.1.5", deleting=True),
        pod("no-ip", ""),
    ]
    assert pool_endpoints(POOL, pods) == ["127.0.1.1:8000", "127.0.1.2:8000"]


def test_every_target_port_of_a_pod_is_an_endpoint():
    pool = {"spec": {**POOL["spec"], "targetPorts": [{"number": 8000}, {"number": 8001}]}}
    assert pool_endpoints(pool, [pod("a", "127.0.1.1")]) == ["127.0.1.1:8000", "127.0.1.1:8001"]


def test_the_eds_document_is_one_load_assignment_of_the_cluster():
    document = eds_document("pool", ["127.0.1.1:8000"], version=7)
    (assignment,) = document["resources"]
    assert document["version_info"] == "7"
    assert assignment["cluster_name"] == "pool"
    (host,) = assignment["endpoints"][0]["lb_endpoints"]
    assert host["endpoint"]["address"]["socket_address"] == {"address": "127.0.1.1", "port_value": 8000}


def routed_config(**picker) -> dict:
    doc = inference().engine("vllm-ascend").routing("inferencePool", **({"picker": picker} if picker else {}))
    return picker_config(validate(doc.build()).obj.spec)


def test_the_picker_names_the_best_endpoint_and_as_many_fallbacks_as_asked():
    for fallbacks, named in ((None, 1), (2, 3)):
        config = routed_config(**({} if fallbacks is None else {"fallbacks": fallbacks}))
        (picker,) = [p for p in config["plugins"] if p["type"] == "max-score-picker"]
        assert picker["parameters"] == {"maxNumOfEndpoints": named}
        assert picker_fallbacks(config) == named - 1  # what the dev cluster's gateway retries
        (profile,) = config["schedulingProfiles"]
        assert {"pluginRef": "max-score-picker"} in profile["plugins"]
    assert picker_fallbacks({"plugins": []}) == 0


def test_the_picker_passes_over_an_engine_whose_gauges_are_stale():
    """The saturation detector also filters: an engine whose scrapes stopped (a dead node) is not chosen."""
    config = routed_config()
    (profile,) = config["schedulingProfiles"]
    detector = config["saturationDetector"]["pluginRef"]
    assert profile["plugins"][0] == {"pluginRef": detector}
    (parameters,) = [p["parameters"] for p in config["plugins"] if p["type"] == detector]
    assert parameters["metricsStalenessThreshold"] == "1s"


def test_fallbacks_beyond_four_are_refused():
    with pytest.raises(InvalidSpec, match="fallbacks"):
        routed_config(fallbacks=5)


def test_the_gateway_retries_each_fallback_over_the_pools_endpoints(tmp_path):
    config = envoy_config(8080, 8081, picker_port=9002, pool_eds=tmp_path / "pool.json", fallbacks=2)
    (pool,) = [c for c in config["static_resources"]["clusters"] if c["name"] == "pool"]
    source = pool["eds_cluster_config"]["eds_config"]["path_config_source"]
    assert source["path"] == str(tmp_path / "pool.json")
    (policy,) = pool["load_balancing_policy"]["policies"]
    override = policy["typed_extension_config"]["typed_config"]
    assert override["override_host_sources"] == [{"header": "x-gateway-destination-endpoint"}]
    retry = route(config)["retry_policy"]
    assert retry["num_retries"] == 2
    assert "connect-failure" in retry["retry_on"].split(",")
    # No fallbacks, no retries: the gateway does not send a request again where the picker did not say.
    assert "retry_policy" not in route(
        envoy_config(8080, 8081, picker_port=9002, pool_eds=tmp_path / "p.json")
    )


def route(config: dict) -> dict:
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (only,) = manager["route_config"]["virtual_hosts"][0]["routes"]
    return only["route"]


def test_a_picker_gateway_without_its_pool_is_refused():
    with pytest.raises(ValueError, match="pool"):
        Envoy(picker_port=9002)
    with pytest.raises(ValueError, match="pool_eds"):
        envoy_config(8080, 8081, picker_port=9002)


def test_the_gateway_calls_the_serving_pickers_of_a_file_and_moves_off_one_that_fails(tmp_path):
    config = envoy_config(
        8080, 8081, picker_eds=tmp_path / "pickers" / "pickers.json", pool_eds=tmp_path / "pool.json"
    )
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    pickers = clusters["endpoint_picker"]
    assert pickers["type"] == "EDS" and "load_assignment" not in pickers
    source = pickers["eds_cluster_config"]["eds_config"]["path_config_source"]
    assert source["path"] == str(tmp_path / "pickers" / "pickers.json")
    # One refused connection ejects the picker (Envoy's own errors, not the picker's answers).
    ejection = pickers["outlier_detection"]
    assert (
        ejection["consecutive_local_origin_failure"] == 1 and ejection["split_external_local_origin_errors"]
    )
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (ext_proc, _router) = manager["http_filters"]
    # A stream the dead picker refused is opened again, on the other one (never on a picker it failed on).
    retry = ext_proc["typed_config"]["grpc_service"]["retry_policy"]
    assert retry["num_retries"] >= 1
    predicates = [p["name"] for p in retry["retry_host_predicate"]]
    assert predicates == ["envoy.retry_host_predicates.previous_hosts"]
    assert ext_proc["typed_config"]["failure_mode_allow"] is False
    fail_open = envoy_config(8080, 8081, picker_port=9002, pool_eds=tmp_path / "p.json", fail_open=True)
    (ext_proc, _router) = fail_open["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
        "typed_config"
    ]["http_filters"]
    assert ext_proc["typed_config"]["failure_mode_allow"] is True
    with pytest.raises(ValueError, match="one port or an EDS file"):
        envoy_config(
            8080, 8081, picker_port=9002, picker_eds=tmp_path / "x.json", pool_eds=tmp_path / "p.json"
        )


def test_followed_endpoints_write_what_their_source_says_and_keep_the_last_on_a_failed_read(tmp_path):
    answers: list[list[str] | Exception] = [
        ["127.0.0.1:9002", "127.0.0.1:9003"],
        OSError("down"),
        ["127.0.0.1:9003"],
    ]

    def read() -> list[str]:
        answer = answers.pop(0) if answers else ["127.0.0.1:9003"]
        if isinstance(answer, Exception):
            raise answer
        return answer

    path = tmp_path / "pickers.json"
    followed = FollowedEndpoints(read, path, "endpoint_picker", interval=0.05).start()
    try:
        first = json.loads(path.read_text())
        assert len(first["resources"][0]["endpoints"][0]["lb_endpoints"]) == 2
        wait_for(
            lambda: followed.endpoints == ["127.0.0.1:9003"], 5, "the picker that stopped serving dropped"
        )
    finally:
        followed.stop()
    (host,) = json.loads(path.read_text())["resources"][0]["endpoints"][0]["lb_endpoints"]
    assert host["endpoint"]["address"]["socket_address"]["port_value"] == 9003


class FakeKube:
    """The two reads PoolEndpoints makes, and an outage switch."""

    def __init__(self, pods: list[dict]) -> None:
        self.pods, self.down = pods, False

    def get(self, kind: str, namespace: str, name: str) -> dict:
        if self.down:
            raise KubeError(503, "ServiceUnavailable", "the API server does not answer")
        assert (kind, namespace, name) == ("InferencePool", "ns", "llm")
        return POOL

    def list(self, kind: str, namespace: str, selector: dict | None = None) -> list[dict]:
        assert kind == "Pod" and selector == POOL["spec"]["selector"]["matchLabels"]
        return self.pods


def hosts(path: Path) -> list[str]:
    (assignment,) = json.loads(path.read_text())["resources"]
    return [
        "{address}:{port_value}".format(**h["endpoint"]["address"]["socket_address"])
        for h in assignment["endpoints"][0]["lb_endpoints"]
    ]


def test_the_file_follows_the_pool_and_changes_only_when_it_does(tmp_path):
    kube = FakeKube([pod("a", "127.0.1.1")])
    path = tmp_path / "pool.json"
    writer = PoolEndpoints(PoolRef(kube, "ns", "llm"), path, "pool")  # type: ignore[arg-type]
    writer.refresh()
    assert hosts(path) == ["127.0.1.1:8000"] and writer.version == 1
    writer.refresh()
    assert writer.version == 1  # unchanged: not rewritten
    kube.pods.append(pod("b", "127.0.1.2"))
    writer.refresh()
    assert hosts(path) == ["127.0.1.1:8000", "127.0.1.2:8000"] and writer.version == 2


def test_an_api_outage_keeps_the_last_endpoints(tmp_path):
    kube = FakeKube([pod("a", "127.0.1.1")])
    path = tmp_path / "pool.json"
    writer = PoolEndpoints(PoolRef(kube, "ns", "llm"), path, "pool")  # type: ignore[arg-type]
    writer.refresh()
    kube.down = True
    with pytest.raises(KubeError):
        writer.refresh()
    assert hosts(path) == ["127.0.1.1:8000"]  # not emptied: the pods did not go away, the API did


def test_an_api_outage_at_start_leaves_an_empty_file_not_a_missing_one(tmp_path):
    kube = FakeKube([pod("a", "127.0.1.1")])
    kube.down = True
    path = tmp_path / "pool.json"
    writer = PoolEndpoints(PoolRef(kube, "ns", "llm"), path, "pool", interval=0.05).start()  # type: ignore[arg-type]
    try:
        assert hosts(path) == []
        kube.down = False
        wait_for(lambda: hosts(path) == ["127.0.1.1:8000"], 10, "the endpoints once the API answers")
    finally:
        writer.stop()


def draining(path: Path) -> list[str]:
    (assignment,) = json.loads(path.read_text())["resources"]
    return [
        "{address}:{port_value}".format(**h["endpoint"]["address"]["socket_address"])
        for h in assignment["endpoints"][0]["lb_endpoints"]
        if h.get("health_status") == "DRAINING"
    ]


def test_a_selected_pod_not_ready_or_being_deleted_is_reachable_by_name_only():
    pods = [
        pod("a", "127.0.1.1"),
        pod("starting", "127.0.1.3", ready=False),
        pod("deleting", "127.0.1.5", deleting=True),
        pod("drained", "127.0.1.4", labels={"app": "llm", "serving": "false"}),
        pod("no-ip", ""),
    ]
    assert pool_endpoints(POOL, pods) == ["127.0.1.1:8000"]
    assert pool_addresses(POOL, pods) == ["127.0.1.1:8000", "127.0.1.3:8000", "127.0.1.5:8000"]


def test_an_endpoint_that_left_the_pool_stays_reachable_by_name_for_the_linger(tmp_path):
    """The picker learns of a drained pod a moment after the file does: for ``linger`` seconds the file keeps
    its address as draining (reached when named, never drawn at random), then drops it."""
    now = [0.0]
    kube = FakeKube([pod("a", "127.0.1.1"), pod("b", "127.0.1.2"), pod("new", "127.0.1.3", ready=False)])
    path = tmp_path / "pool.json"
    writer = PoolEndpoints(PoolRef(kube, "ns", "llm"), path, "pool", linger=30, clock=lambda: now[0])  # type: ignore[arg-type]
    writer.refresh()
    assert hosts(path) == ["127.0.1.1:8000", "127.0.1.2:8000", "127.0.1.3:8000"]
    assert draining(path) == ["127.0.1.3:8000"]  # not ready yet: only by name
    kube.pods = [pod("a", "127.0.1.1"), pod("new", "127.0.1.3")]  # b drained and gone; new ready
    now[0] = 10.0
    writer.refresh()
    assert draining(path) == ["127.0.1.2:8000"] and writer.endpoints == ["127.0.1.1:8000", "127.0.1.3:8000"]
    now[0] = 40.5
    writer.refresh()
    assert hosts(path) == ["127.0.1.1:8000", "127.0.1.3:8000"] and draining(path) == []
    # The pickers' file lingers nothing by default.
    assert FollowedEndpoints(lambda: [], tmp_path / "p.json", "endpoint_picker").linger == 0


def test_the_gateway_can_name_the_engine_that_answered(tmp_path):
    manager = envoy_config(
        8080,
        8081,
        picker_port=9002,
        pool_eds=tmp_path / "p.json",
        echoed=["x-a"],
        upstream_header="x-served-by",
    )["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (only,) = manager["route_config"]["virtual_hosts"][0]["routes"]
    added = {h["header"]["key"]: h["header"]["value"] for h in only["response_headers_to_add"]}
    assert added == {"x-a": "%REQ(x-a)%", "x-served-by": "%UPSTREAM_REMOTE_ADDRESS%"}
    plain = envoy_config(8080, 8081, picker_port=9002, pool_eds=tmp_path / "p.json")
    assert "response_headers_to_add" not in str(plain)
