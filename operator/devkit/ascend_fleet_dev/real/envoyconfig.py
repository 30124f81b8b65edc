"""Envoy's bootstrap for the local data plane, as data (pure): the listener, the ``ext_proc`` filter to the
endpoint picker, the pool's cluster with the picker's fallbacks, and the Service-like random cluster.

:class:`~ascend_fleet_dev.real.dataplane.Envoy` writes what :func:`envoy_config` returns and runs the binary;
nothing here starts a process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ascend_fleet_dev.real.poolendpoints import envoy_endpoint

DESTINATION_HEADER = "x-gateway-destination-endpoint"
# What sends a request on to the picker's next endpoint: the connection refused or timed out, or the stream
# reset before the engine answered (an engine that died, or whose node did). Never an answer the engine gave:
# once response headers went to the client Envoy does not retry.
FALLBACK_RETRY_ON = "connect-failure,refused-stream,reset"
FALLBACK_CONNECT_TIMEOUT = "1s"
POOL_CLUSTER = "pool"
PICKER_CLUSTER = "endpoint_picker"


def envoy_config(
    port: int,
    admin_port: int,
    *,
    picker_port: int | None = None,
    picker_eds: Path | None = None,
    endpoints: Sequence[str] = (),
    classifier_port: int | None = None,
    pool_eds: Path | None = None,
    fallbacks: int = 0,
    fail_open: bool = False,
    echoed: Sequence[str] = (),
    upstream_header: str | None = None,
) -> dict[str, Any]:
    """An Envoy bootstrap: one HTTP listener on 127.0.0.1:``port`` routing every path to the engines.

    Through the picker (``picker_port`` with ``pool_eds``), as the Inference Extension's gateways do: a
    cluster of the pool's endpoints (file-based EDS) under the ``override_host`` policy, which sends a request
    to the first endpoint of the picker's destination header and, with ``fallbacks``, a retry policy: a
    request whose endpoint refuses the connection or resets before answering goes to the picker's next
    endpoint, so a dead engine costs a retry, not an error. (The upstream standalone chart's ``ORIGINAL_DST``
    cluster takes the header as one address, so it cannot follow a list.)

    The picker is one port (``picker_port``) or the serving pickers of an EDS file (``picker_eds``): each
    request's stream goes to one of them, and a picker that refuses the stream is ejected at once and the
    stream retried on another. ``fail_open`` lets a request go on unrouted when no picker answers.
    Each request header named in ``echoed`` comes back in the response, as the upstream received it (after
    the picker's header mutations): for tests of what the picker told an engine. ``upstream_header`` names a
    response header carrying the ``host:port`` of the engine that answered (the last one tried).
    """
    filters: list[dict[str, Any]] = []
    clusters: list[dict[str, Any]] = []
    # The classifier goes before the picker, as the Inference Extension chains its body-based router.
    if classifier_port is not None:
        filters.append(_ext_proc_filter("classifier", responses=False))
        clusters.append(_ext_proc_cluster("classifier", classifier_port))
    retry: dict[str, Any] = {}
    if picker_port is not None or picker_eds is not None:
        if pool_eds is None:
            raise ValueError("the picker's gateway needs the pool's endpoints (pool_eds)")
        target = POOL_CLUSTER
        filters.append(_ext_proc_filter(fail_open=fail_open, retry=picker_eds is not None))
        pickers = _ext_proc_cluster(PICKER_CLUSTER, picker_port, eds=picker_eds)
        clusters += [_pool_cluster(target, pool_eds), pickers]
        if fallbacks:
            retry = {"retry_policy": {"retry_on": FALLBACK_RETRY_ON, "num_retries": fallbacks}}
    else:
        target = "service"
        clusters.append(_random_cluster(target, endpoints))
    echo = [
        {"header": {"key": name, "value": f"%REQ({name})%"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
        for name in echoed
    ]
    if upstream_header is not None:
        echo.append(
            {
                "header": {"key": upstream_header, "value": "%UPSTREAM_REMOTE_ADDRESS%"},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            }
        )
    return _bootstrap(port, admin_port, _connection_manager(target, filters, retry, echo), clusters)


def _connection_manager(
    target: str, filters: list[dict[str, Any]], retry: dict[str, Any], echo: list[dict[str, Any]]
) -> dict[str, Any]:
    """The HTTP connection manager: every path to ``target`` through ``filters``, then the router; ``echo``
    adds response headers."""
    router = {
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
    }
    route = {"cluster": target, "timeout": "600s", "idle_timeout": "600s", **retry}
    added = {"response_headers_to_add": echo} if echo else {}
    return {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "inference",
        "route_config": {
            "name": "inference",
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": route, **added}],
                }
            ],
        },
        "http_filters": [*filters, router],
        # Requests wait in the picker's queues: the stream must outlive the default 5-minute idle timeout.
        "stream_idle_timeout": "600s",
    }


def _bootstrap(
    port: int, admin_port: int, manager: dict[str, Any], clusters: list[dict[str, Any]]
) -> dict[str, Any]:
    """The bootstrap around one listener on 127.0.0.1:``port`` and the admin port."""
    listener_filter = {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
    return {
        # A file-based EDS source, like any xDS client, names its node.
        "node": {"id": f"gateway-{port}", "cluster": "ascend-fleet-dev-gateway"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "inference",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                    "filter_chains": [{"filters": [listener_filter]}],
                }
            ],
            "clusters": clusters,
        },
    }


def _ext_proc_filter(
    cluster: str = PICKER_CLUSTER, *, responses: bool = True, fail_open: bool = False, retry: bool = False
) -> dict[str, Any]:
    """Headers and bodies of requests (and responses) streamed to ``cluster``, as the Inference Extension expects.

    The classifier has no response plugin, and its router buffers a streamed response to its end: without
    ``responses`` its filter never sees them, so first tokens reach the client as the engine sends them.
    With ``retry`` (a cluster of several servers) a stream the server refuses is opened again, on another
    host (see :func:`_ext_proc_cluster`); with ``fail_open`` a request whose server cannot be reached goes on
    without it.
    """
    answer = "SEND" if responses else "SKIP"
    return {
        "name": f"envoy.filters.http.ext_proc.{cluster}",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {
                "envoy_grpc": {"cluster_name": cluster},
                "timeout": "10s",
                **({"retry_policy": _STREAM_RETRY} if retry else {}),
            },
            "failure_mode_allow": fail_open,
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": answer,
                "request_body_mode": "FULL_DUPLEX_STREAMED",
                "response_body_mode": "FULL_DUPLEX_STREAMED" if responses else "NONE",
                "request_trailer_mode": "SEND",
                "response_trailer_mode": answer,
            },
            # The picker holds a request while flow control queues it: as long as the client waits.
            "message_timeout": "600s",
        },
    }


def _pool_cluster(name: str, eds: Path) -> dict[str, Any]:
    """The pool's endpoints from the EDS file ``eds``; the first of the picker's endpoints the cluster holds
    serves, and each retry takes the next (``override_host``), random choice only if none is known."""
    random = {
        "name": "envoy.load_balancing_policies.random",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.random.v3.Random"
        },
    }
    override = {
        "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
        "override_host_sources": [{"header": DESTINATION_HEADER}],
        "fallback_policy": {"policies": [{"typed_extension_config": random}]},
    }
    source = {
        "path_config_source": {"path": str(eds), "watched_directory": {"path": str(eds.parent)}},
        "resource_api_version": "V3",
    }
    return {
        "name": name,
        "type": "EDS",
        # A dead node's engine does not refuse, it stays silent: the next endpoint is tried after this long.
        "connect_timeout": FALLBACK_CONNECT_TIMEOUT,
        "eds_cluster_config": {"eds_config": source},
        "load_balancing_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.override_host",
                        "typed_config": override,
                    }
                }
            ]
        },
        "circuit_breakers": _unbounded(),
    }


# A stream that could not be opened (its server refused or reset it before answering) is opened again, at once,
# on another picker than those it failed on: the failed one's ejection reaches the worker a moment later, and
# until then a retry without this predicate may draw the same dead picker again.
_STREAM_RETRY = {
    "num_retries": 2,
    "retry_back_off": {"base_interval": "0.01s", "max_interval": "0.05s"},
    "retry_host_predicate": [
        {
            "name": "envoy.retry_host_predicates.previous_hosts",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
            },
        }
    ],
    "host_selection_retry_max_attempts": 3,
}


def _ext_proc_cluster(name: str, port: int | None, *, eds: Path | None = None) -> dict[str, Any]:
    """An ext_proc gRPC server (picker or classifier): HTTP/2 over TLS with its self-signed certificate, on
    127.0.0.1:``port`` or at the endpoints of the EDS file ``eds``. Of several, one that fails a connection is
    ejected at once (until the EDS file drops it or it answers again), so the next stream goes elsewhere."""
    if (port is None) == (eds is None):
        raise ValueError("an ext_proc cluster is one port or an EDS file")
    hosts: dict[str, Any]
    if eds is not None:
        source = {
            "path_config_source": {"path": str(eds), "watched_directory": {"path": str(eds.parent)}},
            "resource_api_version": "V3",
        }
        hosts = {
            "type": "EDS",
            "eds_cluster_config": {"eds_config": source},
            "outlier_detection": _EJECT_ON_FAILURE,
        }
    else:
        endpoint = envoy_endpoint(f"127.0.0.1:{port}")
        hosts = {
            "type": "STATIC",
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [endpoint]}]},
        }
    return {
        "name": name,
        **hosts,
        "connect_timeout": "5s",
        "circuit_breakers": _unbounded(),
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "transport_socket": {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"alpn_protocols": ["h2"]},
            },
        },
    }


# A connection that fails (refused, reset, timed out) ejects its host for a while: Envoy's own errors count,
# not the server's answers, and one is enough.
_EJECT_ON_FAILURE = {
    "split_external_local_origin_errors": True,
    "consecutive_local_origin_failure": 1,
    "enforcing_consecutive_local_origin_failure": 100,
    "interval": "1s",
    "base_ejection_time": "5s",
    "max_ejection_percent": 100,
}


def _random_cluster(name: str, endpoints: Sequence[str]) -> dict[str, Any]:
    hosts = [envoy_endpoint(address) for address in endpoints]
    return {
        "name": name,
        "type": "STATIC",
        "lb_policy": "RANDOM",
        "connect_timeout": "5s",
        "circuit_breakers": _unbounded(),
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": hosts}]},
    }


def _unbounded() -> dict[str, Any]:
    limit = 100_000
    return {"thresholds": [{"max_connections": limit, "max_pending_requests": limit, "max_requests": limit}]}


def picker_fallbacks(config: Mapping[str, Any]) -> int:
    """How many endpoints an ``EndpointPickerConfig`` names after the best one (its max-score picker's
    ``maxNumOfEndpoints`` less one; 0 without one), so the gateway retries as often as it has somewhere to go."""
    for plugin in config.get("plugins") or []:
        if plugin.get("type") == "max-score-picker":
            return max(int((plugin.get("parameters") or {}).get("maxNumOfEndpoints", 1)) - 1, 0)
    return 0
