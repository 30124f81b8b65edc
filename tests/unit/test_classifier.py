"""The prompt-length classifier's rendered command line, and Envoy's chain of classifier then picker.

The classifier itself (tools/epp/classify) has Go tests; tests/routing/test_classifier.py runs it in front of
the upstream picker on the real control plane.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ascend_fleet.api import names
from ascend_fleet.render import Owner, validate
from ascend_fleet.render.picker_config import CLASSIFIER_PLUGIN, OBJECTIVE_HEADER, classifier_plugin
from ascend_fleet.render.routing import (
    CLASSIFY_FLAG,
    CLASSIFY_PICKER_PORT,
    CLASSIFY_PICKER_PORT_FLAG,
    PICKER_GRPC_PORT,
    classifier_args,
    render_routing,
)
from ascend_fleet_dev.real.argv import flag
from ascend_fleet_dev.real.envoyconfig import envoy_config

EDS = Path("/run/gateway/pool-endpoints.json")


def inference(**spec):
    doc = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": "llm", "namespace": "default"},
        "spec": {
            "model": {"name": "qwen", "path": "/models/qwen"},
            "engine": {"type": "vllm-ascend"},
            "routing": {"mode": "inferencePool"},
            **spec,
        },
    }
    return validate(doc).obj


def plugin_parameters(args: list[str]) -> dict:
    kind, name, parameters = flag(args, "--plugin").split(":", 2)
    assert (kind, name) == (CLASSIFIER_PLUGIN, CLASSIFIER_PLUGIN)
    return json.loads(parameters)


def picker_of(obj) -> tuple[list[str], dict]:
    """The rendered picker container's args and its EndpointPickerConfig."""
    objects = render_routing(obj.spec, Owner.of(obj))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["args"], yaml.safe_load(config_map["data"]["epp.yaml"])


def test_the_picker_classifies_wherever_classes_are_on():
    """The rendered picker, not a separate router, classes a request that names no objective: its configuration
    holds the classifier and its command line starts the front that runs it (tools/epp/front)."""
    obj = inference(scheduling={"priority": True})
    args, config = picker_of(obj)
    (plugin,) = [p for p in config["plugins"] if p["type"] == CLASSIFIER_PLUGIN]
    assert plugin["parameters"] == classifier_plugin(obj.spec, Owner.of(obj))
    assert CLASSIFY_FLAG in args and flag(args, CLASSIFY_PICKER_PORT_FLAG) == str(CLASSIFY_PICKER_PORT)
    # The front takes the port the pool and the picker Service name; the picker moves behind it.
    assert flag(args, "--grpc-port") == str(PICKER_GRPC_PORT) != str(CLASSIFY_PICKER_PORT)
    # No classes: neither the classifier nor the front.
    args, config = picker_of(inference(routing={"mode": "inferencePool", "classes": []}))
    assert CLASSIFY_FLAG not in args and CLASSIFIER_PLUGIN not in {p["type"] for p in config["plugins"]}
    assert config["flowControl"]["priorityBands"] == []


def test_classifier_names_each_class_objective_at_its_threshold():
    obj = inference()
    parameters = plugin_parameters(classifier_args(obj.spec, Owner.of(obj)))
    assert parameters == {
        "header": OBJECTIVE_HEADER,
        "classes": [
            {"objective": "llm-long", "minPromptTokens": 2049},
            {"objective": "llm-medium", "minPromptTokens": 513},
            {"objective": "llm-short", "minPromptTokens": 0},
        ],
    }


def test_engine_priority_is_the_class_priority_negated_with_priority_scheduling():
    # The picker dispatches higher first; vLLM and SGLang (as rendered) serve lower values first.
    obj = inference(scheduling={"priority": True})
    parameters = classifier_plugin(obj.spec, Owner.of(obj))
    assert parameters["priorityField"] == "priority"
    assert {c["objective"]: c["enginePriority"] for c in parameters["classes"]} == {
        "llm-long": 0, "llm-medium": -1, "llm-short": -2}  # fmt: skip


def test_classifier_ports_are_the_given_ones():
    obj = inference()
    args = classifier_args(obj.spec, Owner.of(obj), grpc_port=1, health_port=2, metrics_port=3)
    assert [flag(args, f) for f in ("--grpc-port", "--grpc-health-port", "--metrics-port")] == ["1", "2", "3"]
    assert "--streaming" in args


def test_envoy_calls_the_classifier_before_the_picker():
    config = envoy_config(8080, 8081, picker_port=9002, classifier_port=9004, pool_eds=EDS)
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    calls = [f["typed_config"].get("grpc_service", {}).get("envoy_grpc", {}).get("cluster_name")
             for f in manager["http_filters"]]  # fmt: skip
    assert calls == ["classifier", "endpoint_picker", None]  # None: the router
    ports = {c["name"]: c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
             ["socket_address"]["port_value"] for c in config["static_resources"]["clusters"]
             if c["name"] in ("classifier", "endpoint_picker")}  # fmt: skip
    assert ports == {"classifier": 9004, "endpoint_picker": 9002}


def test_envoy_without_classifier_has_the_picker_alone():
    config = envoy_config(8080, 8081, picker_port=9002, pool_eds=EDS)
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert len(manager["http_filters"]) == 2


def test_responses_bypass_the_classifier():
    # Its router buffers a streamed response to the end: through it, the first token would arrive with the last.
    config = envoy_config(8080, 8081, picker_port=9002, classifier_port=9004, pool_eds=EDS)
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    modes = {f["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"]: f["typed_config"]["processing_mode"]
             for f in manager["http_filters"] if "grpc_service" in f["typed_config"]}  # fmt: skip
    assert modes["classifier"]["response_body_mode"] == "NONE"
    assert modes["classifier"]["response_header_mode"] == "SKIP"
    assert modes["endpoint_picker"]["response_body_mode"] == "FULL_DUPLEX_STREAMED"
