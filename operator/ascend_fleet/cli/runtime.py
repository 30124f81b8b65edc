"""``ascend-fleet run``: the operator itself.

Its heavy imports (kopf, the Kubernetes client) happen inside the handler, so ``validate`` and ``render`` stay
fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` to the CLI."""
    _add_run(sub)


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run",
        help="Run the operator against a cluster (kubeconfig or in-cluster).",
        description="Run the operator against a cluster (KUBECONFIG, --kubeconfig or in-cluster).",
    )
    run.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    run.add_argument("--context", help="kubeconfig context")
    run.add_argument("--config", help="operator configuration file (default: $ASCEND_FLEET_CONFIG)")
    run.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        dest="namespaces",
        help="watch only this namespace (repeatable; default: $ASCEND_FLEET_WATCH_NAMESPACES, "
        "comma-separated, or cluster-wide)",
    )
    run.add_argument(
        "--peering",
        metavar="NAME",
        help="coordinate several operator replicas through kopf peering NAME (default: standalone)",
    )
    run.add_argument(
        "--priority",
        type=int,
        default=0,
        help="peering priority: with several replicas, give each a different one (highest acts)",
    )
    run.add_argument(
        "--leader-elect-lease",
        metavar="NAME",
        help="run several operator replicas with one acting: the holder of the Lease NAME (default: off)",
    )
    run.add_argument(
        "--leader-elect-namespace",
        metavar="NS",
        help="namespace of the leader Lease (default: $POD_NAMESPACE)",
    )
    run.add_argument(
        "--health-port", type=int, default=8081, help="liveness endpoint port (/healthz; 0 = off)"
    )
    run.add_argument(
        "--metrics-port", type=int, default=8080, help="operator metrics port (/metrics; 0 = off)"
    )
    run.add_argument("--prometheus-url", help="Prometheus for the control loop (overrides the config file)")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    run.set_defaults(handler=cmd_run)


def watch_namespaces(environ: Mapping[str, str]) -> list[str]:
    """The namespaces ``ASCEND_FLEET_WATCH_NAMESPACES`` lists (comma-separated); empty: cluster-wide."""
    listed = environ.get("ASCEND_FLEET_WATCH_NAMESPACES", "").split(",")
    return list(dict.fromkeys(name.strip() for name in listed if name.strip()))


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    from prometheus_client import start_http_server

    from ..handlers.operator import OperatorContext, RunOptions, run_operator
    from ..kube import Kube
    from .documents import DocumentError
    from .inputs import read_settings

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = read_settings(args.config, os.environ, prometheus_url=args.prometheus_url)
    except DocumentError as error:
        print(f"error: cannot load the operator configuration: {error}", file=sys.stderr)
        return 2
    try:
        kube = Kube.connect(args.kubeconfig, args.context)
    except Exception as error:  # kubeconfig and in-cluster loading raise several unrelated types
        print(f"error: cannot find cluster credentials: {error}", file=sys.stderr)
        return 2
    if args.metrics_port:
        start_http_server(args.metrics_port)
    namespaces = args.namespaces or watch_namespaces(os.environ)
    options = RunOptions(
        namespaces=namespaces,
        peering=args.peering,
        priority=args.priority,
        health_port=args.health_port or None,
    )
    ctx = OperatorContext(settings, kube)
    if settings.prometheus.url:
        from ..control.loop import ControlLoop
        from ..handlers.control import control_loop_hook

        ctx.extra_startup.append(control_loop_hook(ControlLoop(settings, kube, namespaces=namespaces)))
    else:
        logging.getLogger(__name__).warning("no prometheus.url configured: the control loop (rules) is off")
    if args.leader_elect_lease:
        return run_with_lease(ctx, options, args)
    asyncio.run(run_operator(ctx, options))
    return 0


def run_with_lease(ctx, options, args: argparse.Namespace) -> int:
    """Stand by for the Lease, then act; the identity goes into the client's User-Agent (the audit log)."""
    import asyncio

    from ..handlers.leader import LeaderElection, candidate_identity, run_elected

    namespace = args.leader_elect_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        print("error: --leader-elect-lease needs --leader-elect-namespace or $POD_NAMESPACE", file=sys.stderr)
        return 2
    identity = candidate_identity(os.environ)
    ctx.kube.api.user_agent = f"{ctx.kube.api.user_agent} {identity}"
    asyncio.run(run_elected(ctx, options, LeaderElection(namespace, args.leader_elect_lease, identity)))
    return 0
