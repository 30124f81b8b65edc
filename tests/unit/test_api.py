import pytest
from pydantic import ValidationError

from ascend_fleet.api.v1alpha1 import AscendInferenceSpec, Rule
from tests.support.documents import inference


def spec(**overrides):
    return AscendInferenceSpec.model_validate(
        inference().engine("vllm-ascend").spec(**overrides).build()["spec"]
    )


def test_defaults_are_filled_in():
    s = spec()
    assert s.engine.port == 8000
    assert s.hardware.chip == "ascend910b"
    assert s.hardware.npus_per_node == 8
    assert s.hardware.resource_name == "huawei.com/Ascend910"
    assert (s.memory.static_fraction, s.memory.dynamic_fraction, s.memory.reserve_fraction) == (
        0.60,
        0.25,
        0.15,
    )
    assert s.precision == "bf16"
    assert s.parallelism.data == 1
    assert [r.describe() for r in s.rules] == [
        "npu_utilization > 85% for 5m -> scale_up",
        "mem_fragmentation > 15% for 10m -> restart_service",
    ]
    assert s.safety_rules and s.rules_in_force()[-1].describe() == "npu_unhealthy > 0 for 30s -> replace"


def test_engine_and_chip_specific_defaults():
    s = spec(engine={"type": "sglang"}, hardware={"chip": "ascend910_93"})
    assert s.engine.port == 30000
    assert s.hardware.npus_per_node == 16
    assert s.image().endswith("-a3")


def test_wire_form_is_camel_case_and_round_trips():
    s = spec(autoscaling={"scaleUpCooldown": "90s"})
    wire = s.wire()
    assert wire["autoscaling"]["scaleUpCooldown"] == "1m30s"
    assert wire["memory"]["staticFraction"] == 0.6
    assert AscendInferenceSpec.model_validate(wire) == s


def test_rules_accept_seed_spellings():
    rule = Rule.model_validate(
        {"metric": "npu_utilization", "threshold": "85%", "for": "5min", "action": "scale_up"}
    )
    assert rule.threshold == pytest.approx(0.85)
    assert rule.for_ == 300
    assert rule.scope == "fleet"
    restart = Rule.model_validate(
        {"metric": "m", "threshold": 0.15, "for": "10m", "action": "restart_service"}
    )
    assert restart.scope == "replica"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"memory": {"staticFraction": 0.7}}, "add up to 1.10"),
        ({"autoscaling": {"minReplicas": 9}}, "minReplicas (9) is above maxReplicas (8)"),
        ({"parallelism": {"tensor": 0}}, "greater than or equal to 1"),
        ({"precision": "fp8"}, "'bf16', 'fp16' or 'int8'"),
        ({"engine": {"type": "triton"}}, "'vllm-ascend' or 'sglang'"),
        ({"rules": [{"metric": "m", "threshold": "85%", "for": "5m", "action": "explode"}]}, "scale_up"),
        ({"rules": [{"threshold": "85%", "for": "5m", "action": "notify"}]}, "exactly one of metric"),
        ({"rules": [{"metric": "m", "threshold": "85%", "for": "soon", "action": "notify"}]}, "30s, 5m"),
        (
            {
                "rules": [
                    {
                        "metric": "m",
                        "threshold": 0.1,
                        "for": "1m",
                        "action": "restart_service",
                        "scope": "fleet",
                    }
                ]
            },
            "scope: replica",
        ),
        ({"model": {"name": "m", "path": "/weights/m", "volume": {"hostPath": {"path": "/x"}}}}, "mountPath"),
        ({"parallelism": {"tensr": 2}}, "Extra inputs"),
    ],
)
def test_invalid_specs_name_the_problem(overrides, message):
    with pytest.raises(ValidationError) as error:
        spec(**overrides)
    assert message in str(error.value)
