"""``ascend-fleet simulate``: one trace through a simulated fleet under each policy, side by side."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from .curve import parse_curve
from .model import EngineModel
from .plot import PlotUnavailable, write_runs_png
from .report import summarize, table, verdict
from .run import POLICIES, SpecError, load_spec, run_all
from .traces import BUILT_IN, HOUR, trace_by_name

EXIT_OK, EXIT_INVALID = 0, 2


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
        "--png",
        metavar="PATH",
        help="also draw replicas, utilization, fragmentation and latency over time (needs matplotlib)",
    )
    command.set_defaults(handler=cmd_simulate)
    return command


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run the chosen policies and print the table, the verdict and where the PNG went."""
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
