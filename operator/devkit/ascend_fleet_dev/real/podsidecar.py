"""A decode pod's ``pd-sidecar`` container run beside the pod's real engine (``ascend-fleet dev-cluster --real
--engines vllm``), so a routed two-role fleet serves here as it would in a cluster: the picker sends a request
to the decode pod, whose sidecar has the prefill pod the picker named compute the prompt, then hands the
request to its own engine, which loads that KV cache.

The program is llm-d's sidecar built from its Go module (``tools/pd-sidecar``); its flags are the container's,
translated for a host whose pods share its addresses (each listed in ``docs/real-cluster.md``):

- ``-port P``: a free port, with a relay from the pod's IP and ``P`` to it (the sidecar listens on every
  address, and ``P`` is the port every engine pod of the fleet holds on its own IP);
- ``-vllm-port E``: a free port, with a relay from ``127.0.0.1`` and it to the engine on the pod's IP and ``E``
  (the sidecar calls its engine on ``localhost``; the engine listens on the pod's IP);
- ``-connector nixlv2``: ``lmcache``, the sidecar's exchange for a connector that needs no handshake (the
  prefill engine asked for one token, then the decode engine sent the request as it came): vLLM's
  ``ExampleConnector``, which stands in for vllm-ascend's Mooncake connectors here, takes no
  ``kv_transfer_params``.

Every other flag passes as rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.real.disaggregation import SIDECAR_CONNECTOR, PdSidecar
from ascend_fleet_dev.real.tcprelay import TcpRelay

# The rendered protocols and the one each becomes here.
_CONNECTORS = {"nixlv2": SIDECAR_CONNECTOR, "lmcache": SIDECAR_CONNECTOR}


class SidecarUnfit(ValueError):
    """The container's flags cannot run here (a flag this translation needs is missing)."""


@dataclass(frozen=True)
class SidecarFlags:
    """The container's flags as this host runs them: the pod's port and its engine's, the rest as passed."""

    port: int
    engine_port: int
    rest: tuple[str, ...]
    changes: tuple[str, ...]


def _flags(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """Go's flag syntax: ``-name value``, ``-name=value`` or a lone boolean ``-name`` (one or two dashes)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        name = args[i].lstrip("-")
        if "=" in name:
            key, value = name.split("=", 1)
            out.append((key, value))
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            out.append((name, args[i + 1]))
            i += 1
        else:
            out.append((name, None))
        i += 1
    return out


def translate_flags(args: Sequence[str]) -> SidecarFlags:
    """The container's ``args`` for this host (see the module docstring)."""
    ports: dict[str, int] = {}
    rest: list[str] = []
    changes: list[str] = []
    for name, value in _flags(args):
        if name in ("port", "vllm-port") and value is not None:
            ports[name] = int(value)
        elif name == "connector" and value in _CONNECTORS:
            rest += ["-connector", _CONNECTORS[value]]
            if _CONNECTORS[value] != value:
                changes.append(f"-connector {value} -> {_CONNECTORS[value]} (vLLM's ExampleConnector here)")
        else:
            rest.append(f"-{name}" if value is None else f"-{name}={value}")
    missing = [f"-{name}" for name in ("port", "vllm-port") if name not in ports]
    if missing:
        raise SidecarUnfit(f"the pd-sidecar container sets no {' or '.join(missing)}")
    changes.append(f"-port {ports['port']} and -vllm-port {ports['vllm-port']} -> free ports behind relays")
    return SidecarFlags(ports["port"], ports["vllm-port"], tuple(rest), tuple(changes))


@dataclass
class PodSidecar:
    """A running sidecar and the two relays that give it the pod's address and reach the pod's engine."""

    process: PdSidecar
    relays: tuple[TcpRelay, ...]
    flags: SidecarFlags

    def stop(self) -> None:
        for relay in self.relays:
            relay.close()
        self.process.stop()


def start_pod_sidecar(
    container: Mapping[str, Any], ip: str, *, binary: str | Path, workdir: Path
) -> PodSidecar:
    """The pod's sidecar on ``ip``, listening once this returns; its engine need not answer yet."""
    flags = translate_flags([str(a) for a in container.get("args") or []])
    local = free_port()
    to_engine = TcpRelay("127.0.0.1", local, flags.engine_port, target_host=ip)
    process = PdSidecar(local, binary=binary, workdir=workdir, flags=flags.rest)
    try:
        process.start()
        to_sidecar = TcpRelay(ip, flags.port, process.port)
    except BaseException:
        process.stop()
        to_engine.close()
        raise
    return PodSidecar(process, (to_sidecar, to_engine), flags)
