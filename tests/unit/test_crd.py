"""The generated CRD: fresh, structural, and rejecting bad CRs with the same messages as pydantic."""

from __future__ import annotations

import pytest
import yaml
from kubernetes_validate import validate as k8s_validate

from ascend_fleet.api.crd import crd, crd_yaml
from tests.support.corpus import ACCEPTED, SAME_SENTENCE
from tests.support.crdcheck import api_server_errors, cel_errors, with_defaults
from tests.support.documents import inference
from tests.support.paths import CRD_FILE, EXAMPLES

CRD = crd()
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_checked_in_crd_is_fresh():
    assert CRD_FILE.read_text() == crd_yaml(), "crds/ is stale: run `make crds`"


def test_crd_is_a_valid_kubernetes_object():
    k8s_validate(yaml.safe_load(crd_yaml()), "1.33", strict=True)


def walk(node, path="<root>"):
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    for path, node in walk(SCHEMA):
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "const", "title"):
            assert banned not in node, f"{path} has {banned}"
        typed = (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"
        if "properties" in node:
            assert "additionalProperties" not in node, f"{path} mixes properties and additionalProperties"


def test_every_spec_field_is_described():
    spec = SCHEMA["properties"]["spec"]
    missing = [
        path for path, node in walk(spec, "spec") if "description" not in node and path.count(".") <= 1
    ]
    assert not missing


def test_scale_subresource_and_printer_columns():
    version = CRD["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.parallelism.data",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Engine",
        "TP",
        "PP",
        "Replicas",
        "Ready-Replicas",
        "NPUs",
        "Ready",
        "Reason",
        "Message",
        "KV-Transfer",
        "Age",
    ]
    # The Ready condition's status and reason, so InvalidSpec shows in `kubectl get ainf`; the message with -o wide.
    ready = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert ready["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert ready["Reason"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert ready["Message"]["priority"] == 1
    assert CRD["spec"]["names"]["shortNames"] == ["ainf"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_pass_the_api_server_checks(example):
    assert api_server_errors(CRD, yaml.safe_load(example.read_text())) == []


GOOD = inference("ok").engine("sglang").build()


def with_spec(**changes):
    return inference("ok").engine("sglang").spec(**changes).build()


def rule(**fields):
    return {"metric": "npu_utilization", "threshold": "85%", "for": "5m", "action": "scale_up", **fields}


BAD = {
    "memory fractions": (with_spec(memory={"staticFraction": 0.7}), "must add up to 1.0"),
    "memory fractions, all set": (
        with_spec(memory={"staticFraction": 0.5, "dynamicFraction": 0.5, "reserveFraction": 0.5}),
        "add up to 1.0",
    ),
    "min above max": (with_spec(autoscaling={"minReplicas": 5, "maxReplicas": 2}), "minReplicas must be <="),
    "min above default max": (with_spec(autoscaling={"minReplicas": 9}), "minReplicas must be <="),
    "percentage over 100": (with_spec(rules=[rule(threshold="150%")]), "does not match"),
    "negative threshold": (with_spec(rules=[rule(threshold=-1)]), "less than the minimum of 0"),
    "word threshold": (with_spec(rules=[rule(threshold="high")]), "does not match"),
    "too many rules": (with_spec(rules=[rule()] * 33), "is too long"),
    "metric and query": (with_spec(rules=[rule(query="up")]), "exactly one of metric"),
    "neither metric nor query": (
        with_spec(rules=[{k: v for k, v in rule().items() if k != "metric"}]),
        "exactly one of metric",
    ),
    "fleet restart": (with_spec(rules=[rule(action="restart_service", scope="fleet")]), "use scope: replica"),
    "long name": ({**GOOD, "metadata": {"name": "x" * 60}}, "at most 52 characters"),
    "tensor zero": (with_spec(parallelism={"tensor": 0}), "parallelism.tensor"),
    "unknown engine": (with_spec(engine={"type": "triton"}), "engine.type"),
    "bad duration": (with_spec(rules=[rule(**{"for": "5 minutes"})]), "does not match"),
    "unknown field": (with_spec(parallelism={"tensr": 2}), "Additional properties"),
    "relative path": (with_spec(model={"name": "m", "path": "models/m"}), "model.path"),
    "rule role on one role": (with_spec(rules=[rule(role="prefill")]), "needs spec.disaggregation"),
    "two roles below the ratio": (
        with_spec(
            disaggregation={"prefill": {}, "decode": {"parallelism": {"data": 2}}, "ratio": {"min": 1}}
        ),
        "below ratio.min",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_crs_fail_with_the_rule_message(case):
    doc, message = BAD[case]
    errors = api_server_errors(CRD, doc)
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize(
    "good",
    [
        with_spec(rules=[rule(threshold=0.85), rule(threshold=12, action="notify", comparison=">=")]),
        with_spec(memory={"staticFraction": 0.8, "dynamicFraction": 0.1, "reserveFraction": 0.1}),
        with_spec(memory={"staticFraction": 1, "dynamicFraction": 0, "reserveFraction": 0}),
        with_spec(autoscaling={"minReplicas": 0, "maxReplicas": 1}),
        with_spec(rules=[rule(**{"for": 300}), rule(**{"for": "1h30m"})]),
        with_spec(rules=[]),
    ],
)
def test_good_crs_pass(good):
    assert api_server_errors(CRD, good) == []


def test_cel_and_pydantic_agree_on_the_corpus():
    """Every CR the CRD rejects, pydantic rejects too (the operator never sees a surprise)."""
    from ascend_fleet.render import InvalidSpec, validate

    for case, (doc, _) in BAD.items():
        with pytest.raises(InvalidSpec):
            validate(doc)
        assert api_server_errors(CRD, doc), case


@pytest.mark.parametrize("case", SAME_SENTENCE, ids=list(SAME_SENTENCE))
def test_cel_says_what_validate_says(case):
    """The CEL rule's message (or messageExpression) is the sentence `ascend-fleet validate` prints."""
    from ascend_fleet.render import InvalidSpec, validate

    doc = SAME_SENTENCE[case]
    with pytest.raises(InvalidSpec) as refused:
        validate(doc)
    errors = api_server_errors(CRD, doc)
    for problem in refused.value.problems:
        sentence = problem.split(": ", 1)[1] if problem.startswith("spec") else problem
        assert any(error.endswith(sentence) for error in errors), (sentence, errors)


@pytest.mark.parametrize("case", ACCEPTED, ids=list(ACCEPTED))
def test_accepted_by_both(case):
    from ascend_fleet.render import validate

    validate(ACCEPTED[case])
    assert api_server_errors(CRD, ACCEPTED[case]) == []


def test_layout_rules_report_at_spec_parallelism():
    errors = api_server_errors(CRD, SAME_SENTENCE["tensor must divide the node"])
    assert errors and all(e.startswith("spec.parallelism: ") for e in errors), errors


def test_cel_rules_compile():
    assert cel_errors(SCHEMA, with_defaults(SCHEMA, GOOD)) == []
