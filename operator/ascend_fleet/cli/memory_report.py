"""``ascend-fleet memory-report NAME``: hours of a fleet's HBM series as a CSV and a heatmap PNG."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..api.settings import PrometheusSettings
from ..api.units import parse_duration
from ..report.memory import ReplicaKey, ReportWindow
from .documents import DocumentError
from .inputs import read_settings

OUTPUT_SUFFIXES = (".csv", ".png")
_DEFAULT_KUBECONFIG = Path("~/.kube/config")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``memory-report`` to the command line."""
    help_text = (
        "Write a fleet's HBM used/reserved/fragmentation per replica and time bucket from Prometheus "
        "history: a CSV and/or a heatmap PNG with restarts marked."
    )
    command = sub.add_parser("memory-report", help=help_text, description=help_text)
    command.set_defaults(handler=cmd_memory_report)
    command.add_argument("name", metavar="NAME", help="the AscendInference")
    command.add_argument("-n", "--namespace", default="default", help="its namespace (default: default)")
    command.add_argument("--since", default="12h", help="how far back to read (default 12h)")
    command.add_argument("--step", default="1m", help="one bucket per step (default 1m)")
    command.add_argument(
        "-o",
        "--output",
        action="append",
        required=True,
        metavar="FILE",
        help="report.csv (the rows) or heatmap.png (the picture, needs the 'plot' extra); repeat for both",
    )
    command.add_argument("--prometheus-url", help="Prometheus to read (overrides the config file)")
    command.add_argument(
        "--config", metavar="FILE", help="the operator's configuration: its prometheus settings are used"
    )
    command.add_argument(
        "--kubeconfig", help="read the object's restart_service actions through this kubeconfig"
    )


def _prometheus(args: argparse.Namespace) -> PrometheusSettings:
    """The operator's Prometheus settings (--config, then the environment), with --prometheus-url on top."""
    environ = {} if args.config else os.environ  # a --config file is read alone, as validate and render do
    return read_settings(args.config, environ, prometheus_url=args.prometheus_url).prometheus


def _outputs(paths: list[str]) -> list[Path]:
    outputs = [Path(path) for path in paths]
    for path in outputs:
        if path.suffix.lower() not in OUTPUT_SUFFIXES:
            raise DocumentError(f"{path}: the output kind comes from the suffix: .csv or .png")
    return outputs


def _has_kubeconfig(args: argparse.Namespace) -> bool:
    """Whether a cluster may be reachable: --kubeconfig, $KUBECONFIG or the default file."""
    return bool(args.kubeconfig or os.environ.get("KUBECONFIG") or _DEFAULT_KUBECONFIG.expanduser().exists())


def cmd_memory_report(args: argparse.Namespace) -> int:
    """``memory-report``: read the window's series, then write each requested file."""
    from ..report import heatmap, history, memory

    outputs = _outputs(args.output)
    try:
        window = ReportWindow.ending_at(time.time(), parse_duration(args.since), parse_duration(args.step))
    except ValueError as error:
        raise DocumentError(str(error)) from None
    try:
        answers = history.query_range(
            _prometheus(args), memory.range_queries(args.namespace, args.name), window
        )
    except history.HistoryUnavailable as error:
        raise DocumentError(str(error)) from None
    replicas = memory.histories(answers)
    if not replicas:
        raise DocumentError(
            f"Prometheus has no HBM series of {args.namespace}/{args.name} in the last {args.since}"
        )
    restarts = {key: memory.restarts(replica) for key, replica in replicas.items()}
    actions = _actions(args, window)
    for path in outputs:
        if path.suffix.lower() == ".csv":
            rows = memory.csv_rows(replicas)
            path.write_text(memory.csv_text(rows), encoding="utf-8")
            print(f"{path}: {len(rows)} rows, {len(replicas)} replicas, {len(window.buckets())} buckets")
        else:
            heatmap.draw_heatmap(path, replicas, window, restarts, actions)
            print(f"{path}: heatmap of {len(replicas)} replicas x {len(window.buckets())} buckets")
    marked = sum(len(times) for times in restarts.values())
    print(
        f"restarts seen in the series: {marked}; restart_service actions: {sum(map(len, actions.values()))}"
    )
    return 0


def _actions(args: argparse.Namespace, window: ReportWindow) -> dict[ReplicaKey, list[float]]:
    """The object's restart_service decisions per replica key, when a cluster is reachable."""
    from ..report import history, memory

    if not _has_kubeconfig(args):
        return {}
    recorded, problem = history.recorded_actions(args.namespace, args.name, args.kubeconfig)
    if problem:
        print(problem, file=sys.stderr)
    by_replica = memory.restart_actions(recorded, window.start, window.end)
    return {(args.namespace, args.name, replica): times for replica, times in by_replica.items()}
