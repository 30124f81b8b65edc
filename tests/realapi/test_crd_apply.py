"""The CRD on a real kube-apiserver: accepted (structural, every CEL rule compiled and within the cost
budget), and `kubectl apply` refusing bad objects with the sentence `ascend-fleet validate` prints."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from ascend_fleet.api.policy import MAX_RULES
from ascend_fleet.render import InvalidSpec, validate
from tests.support.corpus import ACCEPTED, SAME_SENTENCE, cr, rule
from tests.support.paths import CRD_FILE, EXAMPLES

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def namespace(real_cluster):
    name = f"crd-{uuid.uuid4().hex[:6]}"
    real_cluster.kubectl("create", "namespace", name)
    yield name
    real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def apply(real_cluster, namespace, doc, *flags, check=False):
    doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    return real_cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, *flags, "-f", "-", input=json.dumps(doc), check=check
    )


def test_the_crd_is_established_with_every_rule(real_cluster):
    stored = real_cluster.kube.get(
        "CustomResourceDefinition", None, yaml.safe_load(CRD_FILE.read_text())["metadata"]["name"]
    )
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions.get("Established") == "True" and conditions.get("NonStructuralSchema") is None, (
        conditions
    )
    # Applying it again, as `kubectl apply -f crds/` does, with client-side apply (its annotation fits too).
    real_cluster.kubectl("apply", "-f", str(CRD_FILE))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_apply_with_validation_on(real_cluster, namespace, example):
    result = apply(real_cluster, namespace, yaml.safe_load(example.read_text()))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", ACCEPTED, ids=list(ACCEPTED))
def test_good_objects_are_accepted(real_cluster, namespace, case):
    result = apply(real_cluster, namespace, ACCEPTED[case])
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", SAME_SENTENCE, ids=list(SAME_SENTENCE))
def test_refused_at_apply_with_validates_sentence(real_cluster, namespace, case):
    doc = SAME_SENTENCE[case]
    with pytest.raises(InvalidSpec) as refused:
        validate(doc)
    result = apply(real_cluster, namespace, doc)
    assert result.returncode != 0, f"the API server accepted {case}"
    for problem in refused.value.problems:
        sentence = problem.split(": ", 1)[1] if problem.startswith("spec") else problem
        assert sentence in result.stderr, (sentence, result.stderr)


@pytest.mark.parametrize(
    ("threshold", "accepted"),
    [
        (0.85, True),
        ("85%", True),
        (12, True),
        ("0.5", True),
        ("150%", False),
        (-1, False),
        ("high", False),
    ],
)
def test_threshold_number_or_percentage(real_cluster, namespace, threshold, accepted):
    result = apply(real_cluster, namespace, cr(rules=[rule(threshold=threshold)]))
    assert (result.returncode == 0) == accepted, result.stderr
    if not accepted:
        assert "spec.rules[0].threshold" in result.stderr


@pytest.mark.parametrize(
    ("threshold", "accepted"),
    [("1s", True), ("500ms", True), ("1m30s", True), ("1x", False), ("500 ms", False), ("1s" * 20, False)],
)
def test_latency_threshold_as_a_duration(real_cluster, namespace, threshold, accepted):
    """The API server reads what pydantic reads: a duration for a latency metric, nothing else."""
    doc = cr(rules=[rule(metric="ttft_p99", threshold=threshold)])
    result = apply(real_cluster, namespace, doc)
    assert (result.returncode == 0) == accepted, result.stderr
    try:
        validate(doc)
    except InvalidSpec:
        assert not accepted, f"validate refused {threshold!r}, which the API server accepts"
    else:
        assert accepted, f"validate accepted {threshold!r}, which the API server refuses"


SHIFT = {"metric": "ttft_p99", "threshold": "1s", "action": "shift_traffic", "to": "int8"}
VARIANTS = [
    {"name": "fp16", "precision": "fp16"},
    {"name": "int8", "precision": "int8", "model": "/models/w8a8"},
]


@pytest.mark.parametrize(
    ("step", "accepted"),
    [
        (25, True),
        ("25%", True),
        ("12.5%", True),
        ("0.5%", True),
        ("100%", True),
        (0, False),
        (101, False),
        ("0%", False),
        ("100.5%", False),
        ("25", False),
        (12.5, False),
    ],
)
def test_step_as_a_number_or_a_percentage(real_cluster, namespace, step, accepted):
    doc = cr(
        engine="vllm-ascend",
        variants=VARIANTS,
        routing={"mode": "inferencePool"},
        rules=[rule(**SHIFT, step=step)],
    )
    result = apply(real_cluster, namespace, doc)
    assert (result.returncode == 0) == accepted, result.stderr
    if not accepted:
        assert "spec.rules[0].step" in result.stderr, result.stderr
    try:
        validate(doc)
    except InvalidSpec as error:
        assert not accepted, error.problems
    else:
        assert accepted, f"validate accepted step {step!r}, which the API server refuses"


def test_more_rules_than_the_bound_are_refused(real_cluster, namespace):
    result = apply(real_cluster, namespace, cr(rules=[rule()] * (MAX_RULES + 1)))
    assert result.returncode != 0 and f"must have at most {MAX_RULES} items" in result.stderr, result.stderr
    assert apply(real_cluster, namespace, cr(rules=[rule()] * MAX_RULES)).returncode == 0


def test_a_window_whose_numbers_could_overflow_is_refused_by_its_pattern(real_cluster, namespace):
    """Before the rule converts it, a window's grammar bounds each number (the rule would otherwise fail with
    an error rather than a sentence); 10000h has five digits and reaches the rule, 100000h does not."""
    result = apply(real_cluster, namespace, cr(rules=[rule(**{"for": "100000h"})]))
    assert result.returncode != 0 and "spec.rules[0].for: Invalid value" in result.stderr, result.stderr
    assert "should match" in result.stderr, result.stderr


def test_kubectl_apply_refuses_unknown_fields(real_cluster, namespace):
    """kubectl's default field validation is strict: an unknown field is an error, not silently dropped."""
    doc = cr(parallelism={"tensr": 2})
    result = apply(real_cluster, namespace, doc)
    assert result.returncode != 0 and 'unknown field "spec.parallelism.tensr"' in result.stderr, result.stderr
    # `--validate=false` (field validation Ignore): stored, with the field pruned.
    lenient = apply(real_cluster, namespace, doc, "--validate=false", "-o", "json")
    assert lenient.returncode == 0, lenient.stderr
    assert "tensr" not in json.loads(lenient.stdout)["spec"]["parallelism"]


def test_other_clients_see_unknown_fields_pruned_with_a_warning(real_cluster, namespace):
    """A client that sends no fieldValidation (the default Warn for API clients) gets the object stored,
    without the field, and a Warning header naming it."""
    from ascend_fleet.api import names

    api = real_cluster.kube.api
    doc = cr(name=f"prune-{uuid.uuid4().hex[:4]}", parallelism={"tensr": 2})
    # Sent past Kube on purpose: the test reads the answer's Warning header, which Kube does not return.
    path = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}"
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    request = api.param_serialize(
        "POST", path, header_params=headers, body=doc, auth_settings=["BearerToken"]
    )
    response = api.call_api(*request)
    stored = json.loads(response.read())
    assert response.status == 201, stored
    assert "tensr" not in stored["spec"]["parallelism"]
    warning = response.getheader("Warning") or ""  # 299 - "unknown field \"spec.parallelism.tensr\""
    assert warning.startswith("299 ") and "unknown field" in warning and "spec.parallelism.tensr" in warning


def test_kubectl_get_shows_the_ready_condition(real_cluster, namespace):
    """The printer columns: `kubectl get ainf` shows the Ready condition's status and reason, -o wide its message."""
    doc = yaml.safe_load((EXAMPLES[0].parent / "sglang-small.yaml").read_text())
    doc["metadata"] = {"name": "columns", "namespace": namespace}
    real_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(doc))
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "InvalidSpec",
        "message": "spec.rules[0].metric: unknown metric",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    real_cluster.kubectl(
        "patch", "ainf", "columns", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"conditions": [condition]}}),
    )  # fmt: skip
    table = real_cluster.kubectl("get", "ainf", "columns", "-n", namespace, "-o", "wide").stdout.splitlines()
    header, row = table[0], table[1]

    def cell(
        name: str,
    ) -> str:  # kubectl pads columns, and an empty cell is blank: cut at the header's offsets
        start = header.index(f" {name} ") + 1
        return row[start:].split()[0]

    assert (cell("READY"), cell("REASON")) == ("False", "InvalidSpec"), table
    assert "spec.rules[0].metric: unknown metric" in table[1]


@pytest.mark.parametrize("name", ["ASCEND_VISIBLE_DEVICES", "LEADER_ADDRESS"])
def test_kubectl_apply_refuses_reserved_engine_env(real_cluster, namespace, name):
    doc = cr(engine="vllm-ascend")
    doc["spec"]["engine"]["env"] = [{"name": "HCCL_BUFFSIZE", "value": "512"}, {"name": name, "value": "0"}]
    result = apply(real_cluster, namespace, doc)
    assert result.returncode != 0, f"the API server accepted engine.env {name}"
    assert "engine.env may not set the NPU device variables" in result.stderr, result.stderr
    doc["spec"]["engine"]["env"] = doc["spec"]["engine"]["env"][:1]
    assert apply(real_cluster, namespace, doc).returncode == 0


@pytest.mark.parametrize(
    "source",
    [{"gitRepo": {"repository": "https://example.com/w.git"}}, {"nfs": {"server": "nfs", "path": "/w"}}],
    ids=["gitRepo", "nfs"],
)
def test_kubectl_apply_refuses_a_model_volume_restricted_refuses(real_cluster, namespace, source):
    """model.volume names the restricted sources (and hostPath) as properties: strict field validation refuses
    any other at apply, and a lenient client's copy loses it and then has no source at all."""
    (kind,) = source
    doc = cr(model={"volume": source})
    result = apply(real_cluster, namespace, doc)
    assert result.returncode != 0 and f'unknown field "spec.model.volume.{kind}"' in result.stderr, (
        result.stderr
    )
    lenient = apply(real_cluster, namespace, doc, "--validate=false")
    assert lenient.returncode != 0 and "spec.model.volume" in lenient.stderr, lenient.stderr
    with pytest.raises(InvalidSpec, match=f"a {kind} volume is refused by Pod Security"):
        validate(doc)
    doc["spec"]["model"]["volume"] = {"persistentVolumeClaim": {"claimName": "models"}}
    assert apply(real_cluster, namespace, doc).returncode == 0
