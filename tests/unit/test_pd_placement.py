"""spec.disaggregation.placement: both roles of a fleet in one topology domain, as pod affinity on every pod."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.render.children import render_all
from ascend_fleet.render.template import schema_problems
from ascend_fleet.render.validation import validate
from tests.support.crdcheck import api_server_errors
from tests.support.documents import inference
from tests.support.paths import EXAMPLES
from tests.unit.test_disaggregation import pods, problems, two_roles

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
SUPER_POD = "example.com/super-pod"


def pod_affinity(pod: dict) -> dict:
    return pod["spec"].get("affinity", {}).get("podAffinity", {})


def test_by_default_every_pod_of_both_roles_prefers_the_fleets_zone():
    found = pods(two_roles())
    assert sorted(found) == ["pd-decode-0", "pd-decode-1", "pd-prefill-0"]
    for pod in found.values():
        affinity = pod_affinity(pod)
        assert REQUIRED not in affinity
        assert affinity[PREFERRED] == [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {names.LABEL_NAME: "pd"}},
                    "topologyKey": "topology.kubernetes.io/zone",
                },
            }
        ]


def test_required_puts_the_term_on_workers_too_and_the_pod_matches_its_own_selector():
    doc = two_roles(
        prefill={"parallelism": {"tensor": 8, "pipeline": 2}},
        placement={"mode": "required", "topologyKey": SUPER_POD},
    )
    found = pods(doc)
    assert "pd-prefill-0-1" in found  # a worker of the two-node prefill instance
    for pod in found.values():
        (term,) = pod_affinity(pod)[REQUIRED]
        assert term["topologyKey"] == SUPER_POD
        # The scheduler lets the fleet's first pod start anywhere only if it matches its own term.
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in term["labelSelector"]["matchLabels"].items())
        assert PREFERRED not in pod_affinity(pod)


def test_mode_none_renders_no_pod_affinity():
    for pod in pods(two_roles(placement={"mode": "none"})).values():
        assert "podAffinity" not in pod["spec"].get("affinity", {})


def test_a_colocated_fleet_gets_no_pair_affinity():
    doc = validate(two_roles()).obj.spec.model_dump()
    assert doc["disaggregation"]["placement"] == {
        "topology_key": "topology.kubernetes.io/zone",
        "mode": "preferred",
    }
    solo = inference("solo").engine("vllm-ascend").build()
    colocated = [o for o in render_all(validate(solo).obj) if o["kind"] == "Pod"]
    assert colocated and all("podAffinity" not in p["spec"].get("affinity", {}) for p in colocated)


def test_a_templates_own_pod_affinity_stays_beside_the_fleets_term():
    own = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
    doc = two_roles(placement={"mode": "required"})
    doc["spec"]["template"] = {"spec": {"affinity": {"podAffinity": {REQUIRED: [own]}}}}
    for pod in pods(doc).values():
        terms = pod_affinity(pod)[REQUIRED]
        assert terms[0] == own
        assert terms[1]["labelSelector"] == {"matchLabels": {names.LABEL_NAME: "pd"}}


def test_the_rendered_pods_are_valid_kubernetes_pods():
    for mode in ("required", "preferred"):
        rendered = list(pods(two_roles(placement={"mode": mode, "topologyKey": SUPER_POD})).values())
        for pod in rendered:
            assert schema_problems([pod]) == []


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("Zone/x", "the prefix before '/' must be a DNS subdomain"),
        ("-zone", "the name must be at most 63 characters"),
        ("example.com/" + "z" * 64, "the name must be at most 63 characters"),
        ("a/b/c", "the prefix before '/' must be a DNS subdomain"),
    ],
)
def test_a_topology_key_that_is_not_a_label_key_is_refused_by_the_model_and_the_crd(key, why):
    doc = two_roles(placement={"topologyKey": key})
    assert "topologyKey must be a node label key" in problems(doc) and why in problems(doc)
    errors = api_server_errors(crd(), doc)
    assert any("topologyKey" in e for e in errors), errors


def test_good_keys_and_the_default_pass_the_crd():
    for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname", SUPER_POD, "rack"):
        assert api_server_errors(crd(), two_roles(placement={"topologyKey": key, "mode": "required"})) == []
    assert api_server_errors(crd(), two_roles(placement={"mode": "sometimes"}))


def test_required_over_the_domain_availability_spreads_over_is_refused():
    doc = two_roles(placement={"mode": "required", "topologyKey": "topology.kubernetes.io/zone"})
    doc["spec"]["availability"] = {"spread": "zone"}
    assert "a second leader could never start" in problems(doc)
    assert any("a second leader could never start" in e for e in api_server_errors(crd(), doc))
    # spread node (the default) is over kubernetes.io/hostname
    node = two_roles(placement={"mode": "required", "topologyKey": "kubernetes.io/hostname"})
    node["spec"]["availability"] = {}
    assert "a second leader could never start" in problems(node)
    assert any("a second leader could never start" in e for e in api_server_errors(crd(), node))
    doc["spec"]["disaggregation"]["placement"]["mode"] = "preferred"
    validate(doc)  # a preference yields to the spread
    assert api_server_errors(crd(), doc) == []
    doc["spec"]["disaggregation"]["placement"] = {"mode": "required", "topologyKey": SUPER_POD}
    validate(doc)  # one super-pod, spread over its zones: possible
    assert api_server_errors(crd(), doc) == []


def test_the_disaggregated_examples_render_the_default_placement():
    examples = [p for p in EXAMPLES if "disaggregated" in Path(p).name]
    assert examples
    for path in examples:
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if not doc or doc.get("kind") != "AscendInference":
                continue
            rendered = [o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"]
            assert rendered
            for pod in rendered:
                (entry,) = pod_affinity(pod)[PREFERRED]
                assert entry["podAffinityTerm"]["labelSelector"]["matchLabels"] == {
                    names.LABEL_NAME: doc["metadata"]["name"]
                }
