"""The NetworkPolicy of one AscendInference: who may open a connection to its engine pods.

Engines listen on ports that trust whoever connects: torch.distributed's store and Ray's GCS take pickled
objects without credentials, HCCL and the KV transfer open data ports chosen at run time. So one policy per
fleet selects its engine pods and admits, on ingress:

- the fleet's own engine pods, on every port (a gang's ranks and a prefill/decode pair reach each other on
  ports the collective libraries pick at run time, so no port list would hold);
- the fleet's endpoint picker, on the HTTP port (requests and the /metrics it scores by);
- the gateway's proxies (and ``extraPeers``), on the HTTP port;
- Prometheus, on the HTTP port and the NPU exporter's port.

Egress stays open (engines download weights, reach the KV store). Pod-to-pod peers without a namespace
selector match only the policy's own namespace, so another namespace's pods cannot pose as the fleet's.
"""

from __future__ import annotations

from ..api import names
from ..api.settings import NetworkPolicySettings, PeerSettings
from .metadata import Owner, common_labels, metadata


def engine_selector(name: str) -> dict[str, str]:
    """The engine pods of one inference (not its endpoint picker's pods, which carry the name label too)."""
    return {names.LABEL_NAME: name, names.LABEL_APP_COMPONENT: names.COMPONENT_ENGINE}


def picker_pods(name: str) -> dict[str, str]:
    """The endpoint picker's pods of one inference."""
    return {names.LABEL_NAME: name, names.LABEL_APP_COMPONENT: names.COMPONENT_PICKER}


def _selector(labels: dict[str, str]) -> dict:
    """A label selector; {} (everything) without labels, as the API server stores an empty one."""
    return {"matchLabels": dict(labels)} if labels else {}


def _peer(peer: PeerSettings) -> dict:
    return {"namespaceSelector": _selector(peer.namespace_labels), "podSelector": _selector(peer.pod_labels)}


def _ports(numbers: list[int]) -> list[dict]:
    return [{"protocol": "TCP", "port": port} for port in numbers]


def render_network_policy(
    owner: Owner, http_port: int, metrics_ports: list[int], settings: NetworkPolicySettings
) -> dict:
    """The fleet's NetworkPolicy, named like the fleet: ``http_port`` is spec.engine.port, ``metrics_ports``
    the other ports Prometheus scrapes (the NPU exporter's, when it runs)."""
    name = owner.name
    serving = [_peer(settings.gateway), *(_peer(p) for p in settings.extra_peers)]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(owner, name, common_labels(name)),
        "spec": {
            "podSelector": {"matchLabels": engine_selector(name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": engine_selector(name)}}]},
                {
                    "from": [{"podSelector": {"matchLabels": picker_pods(name)}}, *serving],
                    "ports": _ports([http_port]),
                },
                {"from": [_peer(settings.prometheus)], "ports": _ports([http_port, *metrics_ports])},
            ],
        },
    }
