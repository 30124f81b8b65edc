"""``ascend-fleet simulate``: one trace through a simulated fleet under each policy, side by side."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from .curve import parse_curve
from .model import EngineModel
from .plot import PlotUnavailable, write_runs_png
from .report import summarize, table, verdict
from .routing import LOADS, SLOTS, as_json, routing_report, run_routing
from .run import POLICIES, SpecError, load_spec, run_all
from .traces import BUILT_IN, HOUR, trace_by_name

EXIT_OK, EXIT_INVALID = 0, 2
# The routing table's fleet: 16 times bench/routing's two replicas, at the same 4 slots each.
ROUTING_REPLICAS = 32


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``simulate`` command to the CLI's subcommands."""
    text = "Compare autoscaling policies on a simulated fleet: latency, cost, restarts, side by side."
    command = sub.add_parser("simulate", help=text, description=text)
    command.add_argument(
        "--trace",
        default="diurnal",
        help=f"built-in trace ({', '.join(BUILT_IN)}) or a CSV of arrival seconds, prompt "
        "tokens, output tokens (default: diurnal)",
    )
    command.add_argument(
        "--policy", default="all", choices=[*POLICIES, "all"], help="policy to run (default: all)"
    )
    command.add_argument(
        "--spec",
        help="AscendInference YAML for the layout, bounds and rules "
        "(default: examples/vllm-tp4-pp2-dp2.yaml)",
    )
    command.add_argument("--hours", type=float, default=24.0, help="simulated hours (default: 24)")
    command.add_argument(
        "--seed", type=int, default=1, help="trace seed; the same seed gives the same numbers"
    )
    command.add_argument(
        "--replicas", type=int, help="static replicas (default: enough for the trace's peak)"
    )
    command.add_argument(
        "--hpa-target", type=float, default=0.70, help="HPA utilization target (default: 0.70)"
    )
    command.add_argument(
        "--cold-start",
        type=float,
        help=f"seconds until a new or restarted replica serves (default: {EngineModel().cold_start:g})",
    )
    command.add_argument(
        "--curve",
        help="batch curve as batch:tokens_per_s:first_token_ms,... "
        "(default: the seeds' 4:180:45,...,128:2150:450)",
    )
    command.add_argument(
        "--routing",
        action="store_true",
        help="instead of the policies: the routing table (service, pool, classes, classes-seed-order, "
        "classes-engine-priority at loads 0.5 to 1.05 of a fixed fleet's capacity, with the floor)",
    )
    command.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help="with --routing: seconds of trace per load (default: 60)",
    )
    command.add_argument(
        "--loads",
        default=",".join(f"{x:g}" for x in LOADS),
        help="with --routing: arrival rates over the fleet's capacity (default: 0.5,0.75,0.9,1.05)",
    )
    command.add_argument("--json", metavar="FILE", help="with --routing: also write the figures to FILE")
    command.add_argument(
        "--png",
        metavar="PATH",
        help="also draw replicas, utilization, fragmentation and latency over time (needs matplotlib)",
    )
    command.set_defaults(handler=cmd_simulate)
    return command


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run the chosen policies and print the table, the verdict and where the PNG went."""
    if args.routing:
        return cmd_routing(args)
    try:
        spec = load_spec(args.spec)
        if args.hours <= 0:
            raise ValueError(f"--hours must be positive, got {args.hours:g}")
        engine = EngineModel()
        if args.curve:
            engine = replace(engine, curve=parse_curve(args.curve))
        if args.cold_start is not None:
            engine = replace(engine, cold_start=args.cold_start)
        trace = trace_by_name(args.trace, args.hours * HOUR, args.seed)
    except (SpecError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    names = POLICIES if args.policy == "all" else (args.policy,)
    started = time.monotonic()
    results = run_all(spec, trace, names, replicas=args.replicas, engine=engine, hpa_target=args.hpa_target)
    elapsed = time.monotonic() - started
    summaries = [summarize(r) for r in results]
    print(
        f"trace {trace.name}: {len(trace)} requests over {args.hours:g} h ({trace.mean_rate():.2f} req/s), "
        f"seed {args.seed}; {results[0].npus_per_replica} NPUs per replica; simulated in {elapsed:.1f}s"
    )
    print(table(summaries))
    for sentence in verdict(summaries):
        print(sentence)
    if args.png:
        try:
            print(f"wrote {write_runs_png(results, args.png, f'{trace.name}, seed {args.seed}')}")
        except PlotUnavailable as error:
            print(f"no PNG: {error}", file=sys.stderr)
    return EXIT_OK


def parse_loads(text: str) -> list[float]:
    """``--loads``: positive numbers separated by commas, or a ValueError saying what fits."""
    try:
        loads = [float(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--loads takes numbers separated by commas, e.g. 0.5,0.9; got {text!r}") from None
    if not loads or any(not 0 < load <= 10 for load in loads):
        raise ValueError(f"--loads must each be above 0 and at most 10 (shares of capacity); got {text!r}")
    return loads


def cmd_routing(args: argparse.Namespace) -> int:
    """The routing table: every routing layer at every load on one trace per load, beside the floor."""
    replicas = args.replicas if args.replicas is not None else ROUTING_REPLICAS
    try:
        loads = parse_loads(args.loads)
        if replicas < 1:
            raise ValueError(f"--replicas must be at least 1, got {replicas}")
        if not 0 < args.seconds <= 3600:
            raise ValueError(f"--seconds must be above 0 and at most 3600, got {args.seconds:g}")
        engine = EngineModel(curve=parse_curve(args.curve)) if args.curve else EngineModel()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    started = time.monotonic()
    runs, rates = run_routing(replicas, args.seconds, args.seed, loads, engine=engine)
    capacity = rates[loads[0]] / loads[0]
    print(f"# simulate --routing: {args.seconds:g} s per load, {replicas} replicas x {SLOTS} slots, "
          f"capacity {capacity:.1f} req/s, seed {args.seed}; simulated in {time.monotonic() - started:.1f} s\n")  # fmt: skip
    print(routing_report(runs, rates))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(as_json(runs), indent=2) + "\n", encoding="utf-8")
        except OSError as error:
            print(f"error: cannot write {args.json}: {error.strerror or error}", file=sys.stderr)
            return EXIT_INVALID
    return EXIT_OK
