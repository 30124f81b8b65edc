"""llm-d's P/D sidecar in a routed two-role fleet's decode pods: the entry of every request to a decode instance.

With ``spec.routing.mode: inferencePool`` the endpoint picker sends a request to a decode pod and names the
prefill pod it chose in ``x-prefiller-host-port``. The sidecar listens on the pool's target port (the engine
port the fleet's spec names, ``http``), sends the request to that prefill pod first and then to its own engine,
which listens on ``spec.engine.port + SIDECAR_ENGINE_PORT_OFFSET`` on the pod (port ``engine``). Without the
header it forwards the request to the engine unchanged; every other path (``/metrics``, ``/health``) too.
Prefill pods keep the engine on the fleet's port: the picker's header and the pool name that port.

Pure: the same spec gives the same containers.
"""

from __future__ import annotations

from ..api import names
from ..api.disaggregation import DEFAULT_PD_SIDECAR_IMAGE
from ..api.v1alpha1 import AscendInferenceSpec

PD_SIDECAR_CONTAINER = "pd-sidecar"
# llm-d's own deployments put the sidecar on 8000 and vLLM on 8200; the engine's port here is the fleet's plus
# the same distance.
SIDECAR_ENGINE_PORT_OFFSET = 200
ENGINE_PORT_NAME = "engine"
# The sidecar's protocol per engine (its -connector flag, llm-d-inference-scheduler v0.4.0 cmd/pd-sidecar):
# nixlv2 asks the prefill engine for the KV cache with kv_transfer_params (do_remote_decode) and hands the
# returned parameters to the decode engine, the exchange vllm-ascend's Mooncake connectors take from vLLM's
# NIXL one; sglang sends both requests with SGLang's bootstrap fields.
SIDECAR_CONNECTORS = {"vllm-ascend": "nixlv2", "sglang": "sglang"}


def sidecar_runs(spec: AscendInferenceSpec, role: str | None) -> bool:
    """Whether a pod of ``role`` carries the sidecar: decode pods of a two-role fleet routed by the picker."""
    return (
        role == names.PD_DECODE
        and spec.disaggregation is not None
        and spec.routing.mode == "inferencePool"
        and spec.engine.type in SIDECAR_CONNECTORS
    )


def sidecar_engine_port(spec: AscendInferenceSpec) -> int:
    """The port a decode engine behind the sidecar listens on."""
    assert spec.engine.port is not None  # filled in by the model's defaults
    return spec.engine.port + SIDECAR_ENGINE_PORT_OFFSET


def behind_sidecar(spec: AscendInferenceSpec) -> AscendInferenceSpec:
    """The spec a decode engine behind the sidecar runs: the same, on the sidecar's engine port."""
    engine = spec.engine.model_copy(update={"port": sidecar_engine_port(spec)})
    return spec.model_copy(update={"engine": engine})


def sidecar_args(spec: AscendInferenceSpec) -> list[str]:
    """The sidecar's command line (the image's entrypoint is the sidecar): its port, the engine's, the protocol.

    ``-secure-proxy=false``: the engines serve plain HTTP inside the cluster, as the pool's endpoints do.
    """
    assert spec.engine.port is not None
    return [
        "-port", str(spec.engine.port),
        "-vllm-port", str(sidecar_engine_port(spec)),
        "-connector", SIDECAR_CONNECTORS[spec.engine.type],
        "-secure-proxy=false",
    ]  # fmt: skip


def sidecar_container(spec: AscendInferenceSpec) -> dict:
    """The sidecar container of a decode leader pod; its port ``http`` is the one the Service and pool target."""
    split = spec.disaggregation
    assert split is not None and spec.engine.port is not None
    return {
        "name": PD_SIDECAR_CONTAINER,
        "image": split.sidecar_image or DEFAULT_PD_SIDECAR_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": sidecar_args(spec),
        "ports": [{"name": "http", "containerPort": spec.engine.port, "protocol": "TCP"}],
        # A proxy: little CPU, and memory for the requests in flight.
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def rename_engine_port(container: dict) -> None:
    """The engine container of a pod with the sidecar: its HTTP port is ``engine`` (``http`` is the sidecar's),
    and its probes follow it."""
    for port in container.get("ports", []):
        if port["name"] == "http":
            port["name"] = ENGINE_PORT_NAME
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check = (container.get(probe) or {}).get("httpGet")
        if check is not None and check.get("port") == "http":
            check["port"] = ENGINE_PORT_NAME
