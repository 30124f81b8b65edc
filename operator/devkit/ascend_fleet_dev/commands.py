"""The dev kit's commands, ``dev-cluster`` and ``dev``, which the ``ascend-fleet`` CLI loads through the
``ascend_fleet.commands`` entry-point group.

Their heavy imports (kmock, the real control plane) happen inside the handlers, so the CLI stays fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def register_dev_cluster(sub: argparse._SubParsersAction) -> None:
    """Add ``dev-cluster`` to the CLI."""
    _add_dev_cluster(sub)


def register_dev(sub: argparse._SubParsersAction) -> None:
    """Add ``dev`` to the CLI."""
    _add_dev(sub)


def _add_dev_cluster(sub: argparse._SubParsersAction) -> None:
    dev = sub.add_parser(
        "dev-cluster",
        help="Serve a local Kubernetes API with a kubelet simulator.",
        description="Serve a local Kubernetes API (no auth, 127.0.0.1) with a kubelet simulator "
        "that runs created pods; writes a kubeconfig for kubectl, helm and `ascend-fleet run`.",
    )
    dev.add_argument(
        "--real",
        action="store_true",
        help="the real control plane (etcd, kube-apiserver, controller manager, scheduler, built from "
        "Go modules on first use) instead of the local emulator; RBAC on, TLS, an admin kubeconfig",
    )
    dev.add_argument(
        "--kube-version",
        metavar="MINOR",
        help="with --real: the Kubernetes minor whose control plane to build and run, 1.30 or 1.34 "
        "(default: 1.34; each is built once and cached)",
    )
    dev.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    dev.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="where to write the kubeconfig (default: ~/.kube/ascend-fleet-dev.yaml, "
        "with --real ~/.kube/ascend-fleet-real.yaml)",
    )
    dev.add_argument("--nodes", type=int, default=4, help="simulated NPU nodes (default: %(default)s)")
    dev.add_argument(
        "--npus-per-node", type=int, default=8, help="NPUs each node offers (default: %(default)s)"
    )
    dev.add_argument(
        "--resource-name",
        default="huawei.com/Ascend910",
        help="the device plugin's resource name (default: %(default)s)",
    )
    dev.add_argument("--pod-start-seconds", type=float, default=1.0, help="Pending -> Running delay")
    dev.add_argument("--pod-ready-seconds", type=float, default=1.0, help="Running -> Ready delay")
    dev.add_argument(
        "--prometheus",
        action="store_true",
        help="also run a real Prometheus scraping the simulated engines (needs the prometheus binary)",
    )
    _add_engine_flags(dev, "engine pods beyond N are refused")
    dev.set_defaults(handler=cmd_dev_cluster)


def _add_engine_flags(parser: argparse.ArgumentParser, beyond: str) -> None:
    """``--engines`` and ``--max-real-engines``, the same for ``dev-cluster`` and ``dev``."""
    parser.add_argument(
        "--engines",
        choices=("simulated", "vllm"),
        default="simulated",
        help="what runs vllm-ascend engine pods: simulated engines, or (with --real) a real `vllm serve` "
        "of a tiny model from `make engine-vllm`; SGLang pods stay simulated (default: %(default)s)",
    )
    parser.add_argument(
        "--max-real-engines",
        type=int,
        default=2,
        metavar="N",
        help=f"with --engines vllm, at most N real engines at once, {beyond} (about 3 GiB each; "
        "default: %(default)s)",
    )


def _add_dev(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "dev",
        help="Run the whole system on this machine and show a scale-up, a restart and a scale-down.",
        description="Start a local Kubernetes API with simulated engines, a real Prometheus and the operator; "
        "apply the demo fleet and show it live until scale_up, restart_service and scale_down have happened.",
    )
    demo.add_argument(
        "-f", "--file", help="the AscendInference to run (default: the packaged examples/demo.yaml)"
    )
    demo.add_argument("--scenario", help="a load scenario YAML file (default: the packaged demo scenario)")
    demo.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="give up after this many seconds (default: 300; with --engines vllm 900)",
    )
    demo.add_argument("--keep", action="store_true", help="keep everything running afterwards, for kubectl")
    demo.add_argument(
        "--real",
        action="store_true",
        help="on the real control plane (built from Go modules on first use) instead of the emulator",
    )
    demo.add_argument(
        "--routing",
        action="store_true",
        help="route the fleet through an InferencePool and the upstream endpoint picker (behind Envoy), send "
        "it requests with the seeds' length mix and show them per priority class (needs --real)",
    )
    demo.add_argument(
        "--rate", type=float, default=4.0, help="requests per second with --routing (default: %(default)s)"
    )
    _add_engine_flags(demo, "the demo's fleet then runs at most N replicas")
    demo.add_argument(
        "--kubeconfig",
        default="~/.kube/ascend-fleet-dev.yaml",
        metavar="PATH",
        help="where to write the kubeconfig (default: %(default)s)",
    )
    demo.set_defaults(handler=cmd_dev)


def cmd_dev(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .demo.runner import DEMO_FILE, DemoOptions, run_demo

    logging.basicConfig(level=logging.ERROR)  # the live view is the output; the parts' logs would drown it
    options = DemoOptions(
        file=Path(args.file) if args.file else DEMO_FILE,
        scenario=Path(args.scenario) if args.scenario else None,
        timeout=args.timeout,
        keep=args.keep,
        kubeconfig=Path(args.kubeconfig),
        real=args.real,
        routing=args.routing,
        rate=args.rate,
        engines=args.engines,
        max_real_engines=args.max_real_engines,
    )
    return run_demo(options)


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    if args.engines != "simulated" and not args.real:
        print("error: --engines vllm runs on the real control plane only (add --real)", file=sys.stderr)
        return 2
    if args.kube_version and not args.real:
        print("error: --kube-version chooses the real control plane's release (add --real)", file=sys.stderr)
        return 2
    if args.real:
        from .real.controlplane import ControlPlaneUnavailable
        from .real.kubeversions import KUBE_VERSION_ENV
        from .real.realengines import RealEnginesUnavailable
        from .serve import serve_real

        logging.basicConfig(level=logging.WARNING)
        if args.kube_version:
            # Every control plane this process starts (and the operator pods it runs) reads the same minor.
            os.environ[KUBE_VERSION_ENV] = args.kube_version
        try:
            serve_real(
                args.kubeconfig or "~/.kube/ascend-fleet-real.yaml",
                nodes=args.nodes,
                npus_per_node=args.npus_per_node,
                resource_name=args.resource_name,
                start_seconds=args.pod_start_seconds,
                ready_seconds=args.pod_ready_seconds,
                prometheus=args.prometheus,
                engines=args.engines,
                real_engine_limit=args.max_real_engines,
            )
        except (ControlPlaneUnavailable, RealEnginesUnavailable) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    from .serve import serve_emulator

    serve_emulator(
        "127.0.0.1",
        args.port,
        args.kubeconfig or "~/.kube/ascend-fleet-dev.yaml",
        args.pod_start_seconds,
        args.pod_ready_seconds,
        nodes=args.nodes,
        prometheus=args.prometheus,
    )
    return 0
