"""values.yaml and values.schema.json: documented, mapped onto the operator's settings, and strict."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest

from ascend_fleet.api.catalog import PRESETS
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.api.units import DURATION_PATTERN
from tests.chart.helm import CHART, default_values, lint, merged_values, values_file
from tests.chart.helm import VALUES_SCHEMA as SCHEMA

VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def schema_errors(values: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in VALIDATOR.iter_errors(values)
    ]


def test_schema_is_a_valid_draft7_schema():
    jsonschema.Draft7Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("name", ["defaults", "all-options", "namespaced", "clusterwide-peering"])
def test_good_values_pass(name):
    values = default_values() if name == "defaults" else merged_values(values_file(name))
    assert schema_errors(values) == []


BAD_VALUES = {
    "unknown top-level key": {"replicaCount": 2},
    "misspelt nested key": {"operator": {"imagee": {"repository": "x"}}},
    "replicas as a string": {"operator": {"replicas": "2"}},
    "negative replicas": {"operator": {"replicas": -1}},
    "two replicas without leader election": {"operator": {"replicas": 2}},
    "two replicas with peering alone (equal priorities pause every pod)": {
        "operator": {"replicas": 2, "peering": {"enabled": True}}
    },
    "leader election flag as a string": {"operator": {"leaderElection": {"enabled": "true"}}},
    "peering flag as a string": {"operator": {"peering": {"enabled": "true"}}},
    "peering name with capitals": {"operator": {"peering": {"enabled": True, "name": "My_Peering"}}},
    "unknown log level": {"operator": {"logLevel": "trace"}},
    "unknown pull policy": {"operator": {"image": {"pullPolicy": "Sometimes"}}},
    "digest that is a tag": {"operator": {"image": {"digest": "latest"}}},
    "extraArgs as a string": {"operator": {"extraArgs": "--prometheus-url=http://p:9090"}},
    "resources as a list": {"operator": {"resources": ["cpu"]}},
    "probe timing as a string": {"operator": {"livenessProbe": {"periodSeconds": "20s"}}},
    "unknown probe field": {"operator": {"readinessProbe": {"httpGet": {"path": "/"}}}},
    "watchNamespaces as a string": {"operator": {"watchNamespaces": "llm-prod"}},
    "invalid namespace name": {"operator": {"watchNamespaces": ["LLM_Prod"]}},
    "repeated namespace": {"operator": {"watchNamespaces": ["a", "a"]}},
    "watchNamespaces at the top level (moved under operator)": {"watchNamespaces": ["llm-prod"]},
    "routing grant as a string": {"rbac": {"routing": "false"}},
    "tenant header that overrides the credentials": {
        "config": {"prometheus": {"headers": {"Authorization": "x"}}}
    },
    "relative bearer token file": {"config": {"prometheus": {"bearerTokenFile": "token"}}},
    "unknown basic-auth key": {"config": {"prometheus": {"basicAuth": {"user": "/u"}}}},
    "prometheusAuth secret with capitals": {"prometheusAuth": {"basicAuth": {"secretName": "My_Secret"}}},
    "prometheusAuth misspelt key": {"prometheusAuth": {"bearerToken": {"secret": "s"}}},
    "serviceAccount.create as a string": {"serviceAccount": {"create": "yes"}},
    "unknown rbac key": {"rbac": {"create": True, "aggregate": True}},
    "Prometheus URL without a scheme": {"config": {"prometheus": {"url": "prometheus:9090"}}},
    "Prometheus URL with credentials": {"config": {"prometheus": {"url": "http://u:p@prometheus:9090"}}},
    "timeout in words": {"config": {"prometheus": {"timeout": "ten seconds"}}},
    "interval in words": {"config": {"control": {"interval": "fast"}}},
    "negative interval": {"config": {"control": {"interval": -5}}},
    "minSamplesFraction of zero": {"config": {"control": {"minSamplesFraction": 0}}},
    "minSamplesFraction above one": {"config": {"control": {"minSamplesFraction": 1.5}}},
    "actionsHistory of zero": {"config": {"control": {"actionsHistory": 0}}},
    "unknown catalog preset": {"config": {"control": {"catalogPreset": "dcgm"}}},
    "catalog entry that is not PromQL text": {"config": {"control": {"catalog": {"npu_utilization": 42}}}},
    "catalog name with capitals": {"config": {"control": {"catalog": {"NPU": "up"}}}},
    "unknown settings key": {"config": {"control": {"intervall": "15s"}}},
    "images given inside config": {"config": {"images": {"sglang": "x"}}},
    "backoff in words": {"config": {"reconcile": {"backoffMax": "ten minutes"}}},
    "unknown engine": {"engineImages": {"tensorrt-llm": {"repository": "x", "tag": ""}}},
    "engine image without a tag key": {"engineImages": {"sglang": {"repository": "x", "tag": None}}},
    "port out of range": {"metrics": {"service": {"port": 70000}}},
    "port as a string": {"metrics": {"port": "8080"}},
    "unknown Service type": {"metrics": {"service": {"type": "Headless"}}},
    "ServiceMonitor interval as a number": {"metrics": {"serviceMonitor": {"interval": 30}}},
    "ServiceMonitor interval in words": {"metrics": {"serviceMonitor": {"interval": "half a minute"}}},
    "label value that is a number": {"metrics": {"serviceMonitor": {"labels": {"release": 1}}}},
    "PodMonitor flag as a string": {"podMonitor": {"enabled": "false"}},
    "PodMonitor namespaces as a map": {"podMonitor": {"namespaces": {"llm": True}}},
    "threshold as a percentage": {"prometheusRule": {"npuUtilization": {"threshold": "85%"}}},
    "threshold above one": {"prometheusRule": {"memoryFragmentation": {"threshold": 15}}},
    "alert duration with a typo": {"prometheusRule": {"metricsMissing": {"for": "10 min"}}},
    "empty severity": {"prometheusRule": {"npuUtilization": {"severity": ""}}},
    "dashboard label value that is a number": {"dashboard": {"labels": {"grafana_dashboard": 1}}},
    "unknown dashboard key": {"dashboard": {"folder": "Ascend"}},
}


@pytest.mark.parametrize("override", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_values_are_rejected(override):
    assert schema_errors(merged_values(override)), "the schema accepted bad values"


def test_helm_enforces_the_schema():
    """The same schema stops Helm itself (lint renders with it): a mistyped value is an error on values.yaml."""
    errors = [m.path for m in lint({"operator": {"replicas": "2"}}) if m.severity == "ERROR"]
    assert "values.yaml" in errors


def schema_leaves(node: dict[str, Any], path: str = "") -> list[str]:
    """Dotted paths of every key the schema defines inside objects it closes (additionalProperties: false)."""
    paths = []
    for key, child in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        if child.get("additionalProperties") is False:
            paths += schema_leaves(child, here)
        else:
            paths.append(here)
    return paths


def lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node[part]
    return node


def test_every_schema_key_has_a_documented_default():
    defaults = default_values()
    missing = [p for p in schema_leaves(SCHEMA) if p != "global" and not _has(defaults, p)]
    assert not missing, f"in values.schema.json but not in values.yaml: {missing}"
    text = (CHART / "values.yaml").read_text()
    assert text.count("# --") >= 60, "values.yaml documents its keys with '# --' comments"


def _has(values: dict[str, Any], path: str) -> bool:
    try:
        lookup(values, path)
    except (KeyError, TypeError):
        return False
    return True


def settings_keys(model: type, prefix: str = "") -> set[str]:
    """Dotted camelCase keys of a settings model (nested models expanded)."""
    keys = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            keys |= settings_keys(annotation, f"{key}.")
        else:
            keys.add(key)
    return keys


def test_config_values_are_exactly_the_operator_settings():
    """Every key under `config` is a settings field and every settings field is a `config` key (images aside:
    they come from engineImages, so tags can default to the chart's appVersion)."""
    config_schema = SCHEMA["properties"]["config"]
    chart_keys = set(schema_leaves(config_schema))
    assert chart_keys == settings_keys(OperatorSettings) - {"images"}
    assert set(SCHEMA["properties"]["engineImages"]["properties"]) == {
        "vllm-ascend",
        "sglang",
        "vllm-ascend/ascend910_93",
        "sglang/ascend910_93",
    }


def test_catalog_presets_and_names_are_the_operators():
    control = SCHEMA["properties"]["config"]["properties"]["control"]["properties"]
    assert control["catalogPreset"]["enum"] == list(PRESETS)
    name_pattern = control["catalog"]["propertyNames"]["pattern"]
    assert all(re.match(name_pattern, name) for preset in PRESETS.values() for name in preset)


def test_default_config_is_valid_operator_settings():
    config = dict(default_values()["config"])
    OperatorSettings.model_validate(config)


def test_schema_durations_follow_the_operator_grammar():
    duration = SCHEMA["properties"]["config"]["properties"]["control"]["properties"]["interval"]
    patterns = [branch.get("pattern") for branch in duration["anyOf"] if branch.get("type") == "string"]
    assert patterns == [DURATION_PATTERN]
    for text in ("30s", "5m", "5min", "1h30m", "250ms"):
        assert re.match(DURATION_PATTERN, text)
