"""The engine container's command line and environment: shared parts here, the engine's own from its module.

Each engine (``ascend_fleet/engines/``) renders what differs between engines; this module adds what every
engine pod gets and is the only place render asks the registry for an engine. The flags are the engines' own
spellings, checked by ``make test-engines``, which runs every generated argv through vLLM's and SGLang's own
argument parsers at the versions of the default images.
"""

from __future__ import annotations

from ..api import names
from ..api.v1alpha1 import AscendInferenceSpec
from ..engines import Flag, Rank, engine_for
from ..engines.registry import has_exporter
from ..layout import Layout, plan_roles, role_spec
from .metadata import leader_address

__all__ = [
    "EXPORTER_PORT",
    "Rank",
    "arg_conflicts",
    "command",
    "engine_env",
    "engine_flags",
    "exporter_runs",
    "leader_ports",
    "version_problems",
    "version_warnings",
]

EXPORTER_PORT = 9410  # the engine exporter's /metrics; container port name "npu-metrics"


def exporter_runs(spec: AscendInferenceSpec) -> bool:
    """``engine.exporter``, where the image can run it: the upstream images do not contain the exporter."""
    return spec.engine.exporter and has_exporter(spec.image() or "")


def engine_flags(spec: AscendInferenceSpec, layout: Layout, at: Rank) -> list[Flag]:
    """The flags the engine gets for this pod, before the user's own args."""
    return engine_for(spec.engine.type).flags(spec, layout, at)


def command(spec: AscendInferenceSpec, layout: Layout, at: Rank) -> list[str]:
    """The container command (argv) for one pod."""
    return engine_for(spec.engine.type).command(spec, layout, at, exporter_runs(spec))


def leader_ports(spec: AscendInferenceSpec) -> list[dict]:
    """The ports a multi-pod replica's leader opens for its workers."""
    return engine_for(spec.engine.type).leader_ports(spec)


def engine_env(spec: AscendInferenceSpec, layout: Layout, name: str, at: Rank) -> list[dict]:
    """Generated environment; a spec.engine.env entry with the same name replaces one in place.

    Kubernetes expands ``$(VAR)`` only from entries listed earlier, so a replaced variable keeps its
    position (later entries such as ``HCCL_IF_IP=$(POD_IP)`` still expand) and new ones go last.
    """
    env: list[dict] = [
        {"name": names.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": names.ENV_POD_NAMESPACE, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": names.ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "TASK_QUEUE_ENABLE", "value": "1"},
        # Explicit both ways: vllm-ascend turns expandable segments on itself when the variable is unset.
        {
            "name": "PYTORCH_NPU_ALLOC_CONF",
            "value": f"expandable_segments:{'True' if spec.memory.expandable_segments else 'False'}",
        },
    ]
    if exporter_runs(spec):
        env += [
            {"name": names.ENV_EXPORTER, "value": "1"},
            {"name": names.ENV_EXPORTER_PORT, "value": str(EXPORTER_PORT)},
        ]
    if layout.multi_pod:
        env.append({"name": names.ENV_LEADER_ADDRESS, "value": leader_address(name, at.replica, at.role)})
    if layout.multi_pod or at.role is not None:  # HCCL between pods: a replica's ranks, or a KV transfer
        interface = spec.hardware.network_interface
        env += [
            {"name": "HCCL_IF_IP", "value": "$(POD_IP)"},
            {"name": "HCCL_SOCKET_IFNAME", "value": interface},
            {"name": "GLOO_SOCKET_IFNAME", "value": interface},
            {"name": "TP_SOCKET_IFNAME", "value": interface},
        ]
    engine = engine_for(spec.engine.type)
    env += engine.env(spec, layout)
    if at.role is not None:
        env += engine.kv_env(spec, at, leader_address(name, 0, "prefill"))
    user = {e.name: e.model_dump(by_alias=True, exclude_none=True) for e in spec.engine.env}
    merged = [user.pop(e["name"], e) for e in env]
    return merged + list(user.values())


def arg_conflicts(spec: AscendInferenceSpec, layout: Layout) -> list[str]:
    """User args that repeat a generated flag, in any spelling the engine accepts: reported, never overridden.

    In a two-role fleet each role's flags count, the KV-transfer ones included: ``engine.args`` never replaces them.
    """
    engine = engine_for(spec.engine.type)
    if spec.disaggregation is None:
        return engine.arg_conflicts(spec, layout)
    found: list[str] = []
    for role, role_layout in plan_roles(spec).items():
        for problem in engine.arg_conflicts(role_spec(spec, role), role_layout, role):
            if problem not in found:
                found.append(problem)
    return found


def version_problems(spec: AscendInferenceSpec, layout: Layout) -> list[str]:
    """Settings the image's engine version cannot run, each with what would fit."""
    image = spec.image()
    if image is None:
        return []
    return engine_for(spec.engine.type).version_problems(spec, layout, image)


def version_warnings(spec: AscendInferenceSpec) -> list[str]:
    """Settings the image's engine starts with but does not act on, each with what to do instead."""
    image = spec.image()
    if image is None:
        return []
    return engine_for(spec.engine.type).version_warnings(spec, image)
