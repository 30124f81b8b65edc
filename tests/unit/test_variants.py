"""spec.variants: replicas per precision, the InferenceModelRewrite's split, status.traffic and the refusals."""

from __future__ import annotations

import json

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.v1alpha1 import PrecisionVariant
from ascend_fleet.api.variants import current_weights, default_weights, parse_weights, serving_split, shifted
from ascend_fleet.reconcile.plan import plan_pass
from ascend_fleet.reconcile.writes import Observed
from ascend_fleet.render import InvalidSpec, Owner, render_all, render_replica, revision, validate
from ascend_fleet.render.picker_config import VARIANT_FILTER, picker_config
from tests.support.crdcheck import api_server_errors
from tests.support.documents import inference
from tests.support.paths import CRD_FILE, ROOT
from tests.unit.test_reconcile_plan import SETTINGS, running

UPSTREAM = ROOT / "charts" / "ascend-fleet" / "files" / "inference-extension"
REWRITE_CRD = yaml.safe_load(
    (UPSTREAM / "inference.networking.x-k8s.io_inferencemodelrewrites.yaml").read_text()
)
CRD = yaml.safe_load(CRD_FILE.read_text())
VARIANTS = [
    {"name": "fp16", "precision": "fp16"},
    {"name": "int8", "precision": "int8", "model": "/models/qwen-w8a8"},
]
NOW = 1_800_000_000.0


def doc(data: int = 4, traffic: str | None = None, **spec) -> dict:
    built = (
        inference("qwen", "qwen", "/models/qwen")
        .namespace("team-a")
        .uid("u-1")
        .engine("vllm-ascend")
        .parallelism(tensor=1, data=data)
        .routing("inferencePool")
        .spec(**({"variants": VARIANTS, "rules": []} | spec))
        .build()
    )
    if traffic is not None:
        built["metadata"]["annotations"] = {names.ANNOTATION_TRAFFIC: traffic}
    return built


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def flag(pod: dict, name: str) -> str:
    command = pod["spec"]["containers"][0]["command"]
    return command[command.index(name) + 1]


def served_rest(rewrite: dict) -> list[tuple[str, int]]:
    (rule,) = rewrite["spec"]["rules"]
    return [(t["modelRewrite"], t["weight"]) for t in rule["targets"]]


def storage_schema(crd: dict) -> dict:
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return {**crd, "spec": {**crd["spec"], "versions": [version]}}


# Rendering -----------------------------------------------------------------------------------------------------


def test_replicas_alternate_between_variants_each_with_its_precision_weights_and_served_name():
    pods = by_kind(render_all(validate(doc()).obj), "Pod")
    variant = {p["metadata"]["labels"][names.LABEL_REPLICA]: p for p in pods}
    assert [variant[str(i)]["metadata"]["labels"][names.LABEL_VARIANT] for i in range(4)] == [
        "fp16", "int8", "fp16", "int8"]  # fmt: skip
    fp16, int8 = variant["0"], variant["1"]
    assert flag(fp16, "--served-model-name") == "qwen-fp16" and flag(fp16, "--dtype") == "float16"
    assert flag(int8, "--served-model-name") == "qwen-int8" and flag(int8, "--quantization") == "ascend"
    assert fp16["spec"]["containers"][0]["command"][2] == "/models/qwen"  # vllm serve <path>
    assert int8["spec"]["containers"][0]["command"][2] == "/models/qwen-w8a8"
    # One pool over all of them: its selector does not look at the variant.
    (pool,) = by_kind(render_all(validate(doc()).obj), "InferencePool")
    assert names.LABEL_VARIANT not in pool["spec"]["selector"]["matchLabels"]
    # Pod names stay <name>-<replica> (a single-pod replica): unique, and stable as the fleet scales.
    assert sorted(p["metadata"]["name"] for p in pods) == [f"qwen-{i}" for i in range(4)]


def test_capacity_leans_to_a_precision_listed_under_two_names_and_the_split_still_covers_all():
    """What docs/decisions.md offers instead of per-variant bounds: two of every three replicas at fp16."""
    three = [{"name": "fp16-a", "precision": "fp16"}, {"name": "fp16-b", "precision": "fp16"}, VARIANTS[1]]
    obj = validate(doc(data=6, variants=three)).obj
    pods = {p["metadata"]["labels"][names.LABEL_REPLICA]: p for p in by_kind(render_all(obj), "Pod")}
    command = [pods[str(i)]["spec"]["containers"][0]["command"] for i in range(6)]
    precisions = [flag(pods[str(i)], "--dtype") if "--dtype" in command[i] else "w8a8" for i in range(6)]
    assert precisions == ["float16", "float16", "w8a8", "float16", "float16", "w8a8"]
    assert [pods[str(i)]["metadata"]["labels"][names.LABEL_VARIANT] for i in range(3)] == [
        "fp16-a",
        "fp16-b",
        "int8",
    ]
    assert flag(pods["2"], "--quantization") == "ascend"
    (rewrite,) = by_kind(render_all(obj), "InferenceModelRewrite")
    assert served_rest(rewrite) == [("qwen-fp16-a", 34), ("qwen-fp16-b", 33), ("qwen-int8", 33)]


def test_a_fleet_without_variants_renders_as_before():
    plain = inference("qwen").uid("u-1").engine("vllm-ascend").routing("inferencePool").spec(rules=[]).build()
    objects = render_all(validate(plain).obj)
    assert by_kind(objects, "InferenceModelRewrite") == []
    assert all(names.LABEL_VARIANT not in p["metadata"]["labels"] for p in by_kind(objects, "Pod"))
    assert all(p["type"] != VARIANT_FILTER for p in picker_config(validate(plain).obj.spec)["plugins"])


def test_changing_one_variant_changes_the_fleets_revision():
    before = validate(doc()).obj.spec
    after = validate(doc(variants=[VARIANTS[0], {**VARIANTS[1], "model": "/models/other"}])).obj.spec
    assert revision(before, "qwen") != revision(after, "qwen")


def test_the_rewrite_splits_the_base_name_by_the_annotation_and_fits_the_upstream_crd():
    (rewrite,) = by_kind(
        render_all(validate(doc(traffic='{"fp16":75,"int8":25}')).obj), "InferenceModelRewrite"
    )
    assert served_rest(rewrite) == [("qwen-fp16", 75), ("qwen-int8", 25)]
    assert rewrite["spec"]["rules"][0]["matches"] == [{"model": {"type": "Exact", "value": "qwen"}}]
    assert rewrite["spec"]["poolRef"]["name"] == "qwen"
    assert rewrite["apiVersion"] == "inference.networking.x-k8s.io/v1alpha2"
    assert api_server_errors(storage_schema(REWRITE_CRD), rewrite) == []
    # The check can fail: upstream weights start at 1, which is why a variant at 0 % is left out.
    broken = json.loads(json.dumps(rewrite))
    broken["spec"]["rules"][0]["targets"][1]["weight"] = 0
    assert api_server_errors(storage_schema(REWRITE_CRD), broken)
    (alone,) = by_kind(
        render_all(validate(doc(traffic='{"fp16":100,"int8":0}')).obj), "InferenceModelRewrite"
    )
    assert served_rest(alone) == [("qwen-fp16", 100)]
    (even,) = by_kind(render_all(validate(doc()).obj), "InferenceModelRewrite")
    assert served_rest(even) == [("qwen-fp16", 50), ("qwen-int8", 50)]  # no annotation: even, as the replicas


def test_the_picker_keeps_only_the_drawn_variants_pods():
    config = picker_config(validate(doc()).obj.spec)
    (plugin,) = [p for p in config["plugins"] if p["type"] == VARIANT_FILTER]
    assert plugin["parameters"] == {
        "label": names.LABEL_VARIANT, "models": {"qwen-fp16": "fp16", "qwen-int8": "int8"}}  # fmt: skip
    refs = [p["pluginRef"] for p in config["schedulingProfiles"][0]["plugins"]]
    # First: the saturation filter after it could leave a saturated variant no pod (it keeps all only when all
    # are saturated), and a filter, before any scorer.
    assert refs.index(VARIANT_FILTER) < refs.index("utilization-detector") < refs.index("queue-scorer")


# Weights -------------------------------------------------------------------------------------------------------


def test_weights_read_back_only_when_they_name_these_variants_and_add_up():
    variants = [
        PrecisionVariant(name="fp16", precision="fp16"),
        PrecisionVariant(name="int8", precision="int8"),
    ]
    assert default_weights(variants) == {"fp16": 50, "int8": 50}
    three = [*variants, PrecisionVariant(name="bf16", precision="bf16")]
    assert default_weights(three) == {"fp16": 34, "int8": 33, "bf16": 33}
    assert current_weights(variants, {"fp16": 50, "int8": 50}) == {"fp16": 50, "int8": 50}
    for bad in (
        {"fp16": 60, "int8": 50},
        {"fp16": 100},
        {"fp16": 100, "bf16": 0},
        {"fp16": 120, "int8": -20},
    ):
        assert current_weights(variants, bad) == {"fp16": 50, "int8": 50}, bad
    assert parse_weights("not json") is None and parse_weights('{"a": true}') is None
    assert parse_weights('{"fp16": 100, "int8": 0}') == {"fp16": 100, "int8": 0}


def test_a_shift_moves_its_step_and_stops_at_everything():
    assert shifted({"fp16": 100, "int8": 0}, "int8", 25) == {"fp16": 75, "int8": 25}
    assert shifted({"fp16": 10, "int8": 90}, "int8", 25) == {"fp16": 0, "int8": 100}
    assert shifted({"fp16": 0, "int8": 100}, "int8", 25) == {"fp16": 0, "int8": 100}
    # With three variants the largest other share gives first.
    assert shifted({"a": 50, "b": 30, "c": 20}, "c", 60) == {"a": 0, "b": 20, "c": 80}


# status.traffic ------------------------------------------------------------------------------------------------


def test_status_traffic_shows_the_split_in_force():
    valid = validate(doc(traffic='{"fp16":50,"int8":50}'))
    status = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS).status
    assert status is not None and status["traffic"] == [
        {"variant": "fp16", "weight": 50}, {"variant": "int8", "weight": 50}]  # fmt: skip
    plain = validate(inference("qwen").uid("u-1").engine("vllm-ascend").spec(rules=[]).build())
    assert "traffic" not in (plan_pass(plain.obj, plain.layout, Observed(), NOW, SETTINGS).status or {})


def test_a_variant_without_a_serving_replica_gives_its_share_to_one_that_serves():
    assert serving_split({"fp16": 25, "int8": 75}, {"fp16"}) == {"fp16": 100, "int8": 0}
    assert serving_split({"fp16": 25, "int8": 75}, {"fp16", "int8"}) == {"fp16": 25, "int8": 75}
    assert serving_split({"fp16": 25, "int8": 75}, set()) == {"fp16": 25, "int8": 75}  # none serves yet
    assert serving_split({"a": 0, "b": 60, "c": 40}, {"a", "c"}) == {"a": 0, "b": 0, "c": 100}


def test_the_rewrite_and_status_leave_out_a_variant_whose_last_replica_is_not_serving():
    """Replica 1 (int8, the only one) is restarting: its 75 % would be refused by the picker's filter."""
    valid = validate(doc(data=2, traffic='{"fp16":25,"int8":75}'))
    owner = Owner.of(valid.obj)
    pods = [
        running(p, ready=replica == 0)
        for replica in (0, 1)
        for p in render_replica(valid.obj.spec, owner, replica, valid.layout)
        if p["kind"] == "Pod"
    ]
    # The picker's Service exists: the other routing objects follow it.
    services = {o["metadata"]["name"]: o for o in render_all(valid.obj) if o["kind"] == "Service"}
    result = plan_pass(valid.obj, valid.layout, Observed(pods=pods, services=services), NOW, SETTINGS)
    (rewrite,) = [o for o in result.creates if o["kind"] == "InferenceModelRewrite"]
    assert served_rest(rewrite) == [("qwen-fp16", 100)]
    assert result.status is not None and result.status["traffic"] == [
        {"variant": "fp16", "weight": 100}, {"variant": "int8", "weight": 0}]  # fmt: skip
    # Once it serves again the annotation's split is back.
    pods = [running(p) for p in pods]
    result = plan_pass(valid.obj, valid.layout, Observed(pods=pods, services=services), NOW, SETTINGS)
    (rewrite,) = [o for o in result.creates if o["kind"] == "InferenceModelRewrite"]
    assert served_rest(rewrite) == [("qwen-fp16", 25), ("qwen-int8", 75)]


# Refusals ------------------------------------------------------------------------------------------------------

BAD = {
    "variants on a Service": (
        {"routing": {"mode": "service"}},
        "spec.variants needs spec.routing.mode inferencePool",
    ),
    "int8 on an SGLang without ModelSlim": (
        {"engine": {"type": "sglang", "image": "lmsysorg/sglang:v0.4.6-cann8.1.rc1-910b"}},
        "spec.variants[1].precision: int8 needs SGLang's --quantization modelslim",
    ),
    "shift to no variant": (
        {"rules": [{"metric": "ttft_p99", "threshold": 1.0, "for": "2m", "action": "shift_traffic", "to": "fp8"}]},
        "spec.rules[0].to: shift_traffic moves traffic to a variant; 'fp8' is not one (spec.variants names one of "
        "fp16, int8)",
    ),
    "shift without to": (
        {"rules": [{"metric": "ttft_p99", "threshold": 1.0, "for": "2m", "action": "shift_traffic"}]},
        "shift_traffic needs to",
    ),
    "to on another action": (
        {"rules": [{"metric": "ttft_p99", "threshold": 1.0, "for": "2m", "action": "scale_up", "to": "int8"}]},
        "only shift_traffic takes to",
    ),
    "bf16 variant on a 910A": (
        {"hardware": {"chip": "ascend910a"}, "precision": "fp16", "engine": {"type": "sglang"},
         "variants": [VARIANTS[0], {"name": "bf16", "precision": "bf16"}]},
        "spec.variants[1].precision: precision bf16 does not run on hardware.chip ascend910a: the Ascend 910A "
        "computes fp16 and int8 only",
    ),
    "repeated variant": ({"variants": [VARIANTS[0], VARIANTS[0]]}, "repeated: fp16"),
    "unknown precision": ({"variants": [{"name": "fp8", "precision": "fp8"}]}, "precision"),
    "variant weights off the model volume": (
        {"model": {"name": "qwen", "path": "/models/qwen", "volume": {"persistentVolumeClaim": {"claimName": "m"}}},
         "variants": [VARIANTS[0], {**VARIANTS[1], "model": "/elsewhere/w8a8"}]},
        "spec.variants[1].model '/elsewhere/w8a8' is not under model.mountPath '/models'",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_variants_are_refused_with_a_sentence(case):
    changes, sentence = BAD[case]
    built = doc()
    built["spec"].update(changes)
    with pytest.raises(InvalidSpec) as error:
        validate(built)
    assert any(sentence in problem for problem in error.value.problems), error.value.problems


@pytest.mark.parametrize(
    "case", ["shift without to", "to on another action", "unknown precision", "bf16 variant on a 910A"]
)
def test_the_crd_refuses_what_it_can_see_alone(case):
    changes, _ = BAD[case]
    built = doc()
    built["spec"].update(changes)
    assert api_server_errors(CRD, built), case


def test_the_crd_admits_a_fleet_with_variants_and_a_shift_rule():
    built = doc(
        rules=[{"metric": "ttft_p99", "threshold": 1.0, "for": "2m", "action": "shift_traffic", "to": "int8"}]
    )
    assert api_server_errors(CRD, built) == []
    assert validate(built).obj.spec.rules[0].step == 25


def ready_message(valid) -> str:
    status = plan_pass(valid.obj, valid.layout, Observed(), NOW, SETTINGS, warnings=valid.warnings).status
    assert status is not None
    return next(c for c in status["conditions"] if c["type"] == "Ready")["message"]


@pytest.mark.parametrize(
    ("variants", "sentence"),
    [
        ([{"name": "int8", "precision": "int8", "model": "/models/qwen-w8a8"}], "every replica runs it"),
        (
            [{"name": "fp16", "precision": "fp16"}, {"name": "int8", "precision": "int8"}],
            "needs W8A8 weights",
        ),
        (
            [
                {"name": "fp16", "precision": "fp16"},
                {"name": "int8", "precision": "int8", "model": "/models/qwen"},
            ],
            "spec.variants[1] (int8) is int8 but serves spec.model.path (/models/qwen)",
        ),
    ],
    ids=["lone-variant", "int8-on-fp16-weights", "int8-naming-the-fp16-path"],
)
def test_variants_that_do_not_do_what_they_say_warn_in_validate_and_in_ready(variants, sentence):
    valid = validate(doc(variants=variants))
    assert [w for w in valid.warnings if sentence in w], valid.warnings
    message = ready_message(valid)
    assert message.startswith("0 of 4 replicas ready; warning: ") and sentence in message, message


def test_two_variants_with_their_own_weights_warn_nothing():
    valid = validate(doc())
    assert not [w for w in valid.warnings if "spec.variants" in w], valid.warnings
    assert "spec.variants" not in ready_message(valid)
    # An int8 fleet's own weights are int8: an int8 variant on spec.model.path is what it runs.
    int8_fleet = validate(
        doc(precision="int8", variants=[{"name": "w8", "precision": "int8"}, *VARIANTS[:1]])
    )
    assert not [w for w in int8_fleet.warnings if "W8A8" in w], int8_fleet.warnings


def test_validate_prints_the_variant_warning(tmp_path, capsys):
    from ascend_fleet.cli.main import main

    path = tmp_path / "lone.yaml"
    path.write_text(yaml.safe_dump(doc(variants=[{"name": "int8", "precision": "int8", "model": "/w8a8"}])))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: spec.variants lists one variant (int8), so every replica runs it" in err, err
