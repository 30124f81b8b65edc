"""The checks of a two-role fleet that need its layouts and the engine pods' other ports.

The models check what the engine's facts alone settle (the connector belongs to the engine, the roles fit it);
this module adds what depends on the rendered pods: the KV port against the engine's own range with its width,
against the ports the pods already open, the connector against the image's release, and the routing mode.
"""

from __future__ import annotations

from ..api import names
from ..api.disaggregation import kv_transfer_of, port_problems, role_instance_cap, two_role_name_problem
from ..api.v1alpha1 import AscendInference, AscendInferenceSpec
from ..engines import facts_of
from ..engines.base import format_version
from ..layout import Layout
from .engine import EXPORTER_PORT, exporter_runs, leader_ports
from .pdplacement import placement_problems
from .pdsidecar import SIDECAR_ENGINE_PORT_OFFSET, sidecar_engine_port, sidecar_runs

# What the operator does not do for a two-role fleet yet, said where it would otherwise do something wrong.
STORE_CONNECTOR = "AscendStoreConnector"


def disaggregation_problems(obj: AscendInference, roles: dict[str, Layout]) -> list[str]:
    """Why a two-role fleet cannot run as written, each a sentence (none for a colocated fleet)."""
    spec = obj.spec
    split = spec.disaggregation
    if split is None:
        return []
    problems = []
    name = two_role_name_problem(obj.name)
    if name:
        problems.append(name)
    problems += _sidecar_port_problems(spec, roles)
    problems += placement_problems(split.placement, spec.availability)
    facts = kv_transfer_of(spec.engine.type)
    if facts is None or split.kv_transfer.port is None:
        return problems
    node = spec.hardware.npus_per_node or 0
    npus = {role: layout.npus_per_pod for role, layout in roles.items()}
    problems += port_problems(split.kv_transfer.port, spec.engine.type, node, npus, _taken_ports(spec, roles))
    problems += _release_problems(spec)
    cap = role_instance_cap(spec.engine.type, names.PD_PREFILL)
    if cap is not None and split.prefill.parallelism.data > cap[0]:
        problems.append(
            f"spec.disaggregation.prefill.parallelism.data: {cap[1]}; use one prefill instance (raise its tensor "
            "size instead)"
        )
    for role, layout in roles.items():
        bounds = split.role(role).autoscaling
        if bounds is not None and not bounds.min_replicas <= layout.data <= bounds.max_replicas:
            problems.append(
                f"spec.disaggregation.{role}.parallelism.data: {layout.data} lies outside the role's autoscaling "
                f"bounds [{bounds.min_replicas}, {bounds.max_replicas}]; set data within them"
            )
    return problems


def _taken_ports(spec: AscendInferenceSpec, roles: dict[str, Layout]) -> dict[int, str]:
    """The ports the engine pods open besides the KV transfer's, by what they are."""
    taken: dict[int, str] = {}
    if spec.engine.port is not None:
        taken[spec.engine.port] = "HTTP port (spec.engine.port)"
    if exporter_runs(spec):
        taken[EXPORTER_PORT] = "exporter's metrics port"
    if any(layout.multi_pod for layout in roles.values()):
        for port in leader_ports(spec):
            taken[port["containerPort"]] = f"leader's {port['name']} port"
    return taken


def _sidecar_port_problems(spec: AscendInferenceSpec, roles: dict[str, Layout]) -> list[str]:
    """The decode engine behind the sidecar takes spec.engine.port + 200: it must exist and be free."""
    if not sidecar_runs(spec, names.PD_DECODE) or spec.engine.port is None:
        return []
    port = sidecar_engine_port(spec)
    where = (
        f"spec.engine.port: with routing.mode inferencePool a decode engine listens on {spec.engine.port} + "
        f"{SIDECAR_ENGINE_PORT_OFFSET} = {port} behind llm-d's P/D sidecar, which takes {spec.engine.port}"
    )
    taken = {k: v for k, v in _taken_ports(spec, roles).items() if k != spec.engine.port}
    kv = spec.disaggregation.kv_transfer.port if spec.disaggregation else None
    width = roles[names.PD_DECODE].npus_per_pod if names.PD_DECODE in roles else 0
    if port > 65535:
        return [f"{where}, past 65535; use a lower engine port"]
    if port in taken:
        return [f"{where}, which is the {taken[port]}; use another engine port"]
    if kv is not None and kv <= port <= kv + width:
        return [f"{where}, inside the KV transfer's ports [{kv}, {kv + width}]; use another engine port"]
    return []


def _release_problems(spec: AscendInferenceSpec) -> list[str]:
    """A connector the image's engine release does not register yet."""
    split, image = spec.disaggregation, spec.image()
    facts = kv_transfer_of(spec.engine.type)
    if split is None or facts is None or image is None:
        return []
    connector = facts.connector(split.kv_transfer.connector or "")
    version = facts_of(spec.engine.type).image_version(image)
    if connector is None or version >= connector.since:
        return []
    return [
        f"spec.disaggregation.kvTransfer.connector: {connector.name} arrived in {spec.engine.type} "
        f"{format_version(connector.since)}, and image {image} carries {format_version(version)}; use a newer "
        f"image or another connector"
    ]


def disaggregation_warnings(spec: AscendInferenceSpec) -> list[str]:
    """What a two-role fleet renders but still needs from elsewhere, or what is not settled upstream."""
    split = spec.disaggregation
    if split is None:
        return []
    warnings = []
    if split.kv_transfer.connector == STORE_CONNECTOR:
        warnings.append(
            f"spec.disaggregation.kvTransfer.connector: {STORE_CONNECTOR} moves the KV cache through a KV pool "
            "whose backend (a Mooncake master and its MOONCAKE_CONFIG_PATH file) the operator does not deploy; "
            "provide it through spec.engine.env and spec.template"
        )
    return warnings
