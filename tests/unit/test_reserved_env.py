"""Names no input may set: the NPU device variables anywhere, the operator's own in the engine container."""

from __future__ import annotations

import pytest

from ascend_fleet.api import names
from ascend_fleet.engines import Rank
from ascend_fleet.layout import plan
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.render.engine import engine_env
from tests.support.documents import RESTRICTED

from .test_render import PROJECT_SGLANG, spec_doc


@pytest.mark.parametrize("name", [*names.DEVICE_ENV, *names.OPERATOR_ENV])
def test_engine_env_may_not_set_a_reserved_name(name):
    with pytest.raises(InvalidSpec, match=rf"spec.engine.env\[0\]: {name} "):
        validate(spec_doc(engine={"type": "vllm-ascend", "env": [{"name": name, "value": "x"}]}))


def test_engine_env_keeps_the_tunable_ones():
    env = [
        {"name": n, "value": "1"}
        for n in ("HCCL_BUFFSIZE", "HCCL_SOCKET_IFNAME", "ASCEND_FLEET_EXPORTER_SNAPSHOTS")
    ]
    validate(spec_doc(engine={"type": "vllm-ascend", "env": env}))


def test_a_sidecar_may_not_name_npus_but_may_use_the_operators_names():
    sidecar = {
        "name": "log",
        "image": "busybox",
        "env": [{"name": "ASCEND_RT_VISIBLE_DEVICES", "value": "0"}],
        "securityContext": RESTRICTED,
    }
    with pytest.raises(
        InvalidSpec, match=r"containers\[0\].env: ASCEND_RT_VISIBLE_DEVICES is the Ascend runtime's"
    ):
        validate(spec_doc(template={"spec": {"containers": [sidecar]}}))
    init = {
        "name": "warm",
        "image": "busybox",
        "securityContext": RESTRICTED,
        "env": [{"name": "ASCEND_VISIBLE_DEVICES", "value": "0"}],
    }
    with pytest.raises(InvalidSpec, match=r"initContainers\[0\].env: ASCEND_VISIBLE_DEVICES"):
        validate(spec_doc(template={"spec": {"initContainers": [init]}}))
    sidecar = {
        "name": "log",
        "image": "busybox",
        "securityContext": RESTRICTED,
        "env": [{"name": "POD_IP", "value": "x"}],
    }
    validate(spec_doc(template={"spec": {"containers": [sidecar]}}))
    engine = {"name": "engine", "env": [{"name": "LEADER_ADDRESS", "value": "x"}]}
    with pytest.raises(InvalidSpec, match=r"containers\[0\].env: LEADER_ADDRESS is set by the operator"):
        validate(spec_doc(template={"spec": {"containers": [engine]}}))


def test_the_reserved_list_is_what_the_operator_generates():
    """Every operator name is one the engine container gets (a gang with the exporter), so the list cannot drift."""
    doc = spec_doc(
        engine={"type": "sglang", "image": PROJECT_SGLANG}, parallelism={"tensor": 8, "pipeline": 2}
    )
    spec = validate(doc).obj.spec
    layout = plan(spec)
    generated = {e["name"] for e in engine_env(spec, layout, "f", Rank(0, 1, layout.pods_per_replica))}
    assert set(names.OPERATOR_ENV) <= generated, set(names.OPERATOR_ENV) - generated
