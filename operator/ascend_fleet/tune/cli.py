"""``ascend-fleet tune``: the command line, the progress bars and the report."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import yaml

from ..api.units import parse_duration, parse_threshold
from ..engines import engine_types
from .choice import DEFAULT_MIN_GAIN, DEFAULT_TOLERANCE, Goal
from .client import BENCH_CLIENT_INSTALL_HINT, ClientError, Load, available
from .ladder import DEFAULT_LADDER, parse_ladder, rounded_ladder, rungs
from .table import format_table
from .tokenizer import check_tokenizer

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``tune`` to the CLI."""
    tune = sub.add_parser(
        "tune",
        help="Measure a batch-size ladder on a live endpoint and set the fleet's batching from it.",
        description="For each batch size of a ladder: set spec.batching.maxBatchSize on the fleet and wait for "
        "the rollout (-f), or just cap the client's concurrency (--endpoint); drive SGLang's benchmark client "
        "at a fixed request rate; then print the table, choose a rung for the goal, draw the curve and write "
        "the choice into spec.batching and status.tuning (printed as a patch with --dry-run).",
    )
    _add_target(tune)
    _add_ladder(tune)
    _add_load(tune)
    _add_choice(tune)
    _add_results(tune)
    tune.set_defaults(handler=cmd_tune)


def _add_target(tune: argparse.ArgumentParser) -> None:
    where = tune.add_argument_group("what to tune")
    where.add_argument(
        "-f", "--file", help="an AscendInference YAML file naming a fleet applied in the cluster"
    )
    where.add_argument(
        "--endpoint",
        metavar="URL",
        help="an OpenAI-compatible endpoint to measure (alone: no cluster; with -f: e.g. a "
        "kubectl port-forward to the fleet's replica 0)",
    )
    where.add_argument(
        "--model",
        help="served model name (default: the fleet's spec.model.name; required with --endpoint alone)",
    )
    where.add_argument(
        "--engine",
        choices=engine_types(),
        help=f"the engine behind --endpoint (default: the fleet's, else {engine_types()[0]})",
    )
    where.add_argument(
        "--chip",
        choices=["ascend910a", "ascend910b", "ascend910_93"],
        help="round the ladder for this chip (default: the fleet's hardware.chip)",
    )
    where.add_argument(
        "-n", "--namespace", help="the fleet's namespace if the file names none (default: default)"
    )
    where.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    where.add_argument("--context", help="kubeconfig context")


def _add_ladder(tune: argparse.ArgumentParser) -> None:
    ladder = tune.add_argument_group("the ladder")
    ladder.add_argument(
        "--ladder",
        default=",".join(map(str, DEFAULT_LADDER)),
        help="batch sizes to measure (default: %(default)s)",
    )
    ladder.add_argument(
        "--no-round",
        action="store_true",
        help="measure the sizes as written, not rounded to the chip's multiple of 16",
    )
    ladder.add_argument(
        "--try-adaptive",
        action="store_true",
        help="measure every size again with the engine's adaptive knobs (SGLang: prefill "
        "delayer, chunked prefill off; vLLM: chunked prefill off); needs -f",
    )


def _add_load(tune: argparse.ArgumentParser) -> None:
    load = tune.add_argument_group("the load (the same at every rung)")
    load.add_argument(
        "--request-rate",
        type=float,
        default=Load.request_rate,
        help="requests per second, Poisson arrivals (default: %(default)s)",
    )
    load.add_argument(
        "--input-tokens",
        type=int,
        default=Load.input_tokens,
        help="longest prompt in tokens (default: %(default)s)",
    )
    load.add_argument(
        "--output-tokens",
        type=int,
        default=Load.output_tokens,
        help="longest output in tokens (default: %(default)s)",
    )
    load.add_argument(
        "--range-ratio",
        type=float,
        default=Load.range_ratio,
        help="lengths are drawn from [ratio x longest, longest] (default: %(default)s)",
    )
    load.add_argument(
        "--prompts-per-slot",
        type=int,
        default=Load.prompts_per_slot,
        help="requests per batch slot at each rung (default: %(default)s)",
    )
    load.add_argument(
        "--settle",
        default="3s",
        help="pause after each rung's rollout before measuring (default: %(default)s)",
    )
    load.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per rung; the least disturbed (lowest TTFT p99) counts (default: %(default)s)",
    )
    load.add_argument(
        "--tokenizer",
        type=Path,
        help="tokenizer directory for the client (default: a word-level one made on the spot)",
    )


def _add_choice(tune: argparse.ArgumentParser) -> None:
    goal = tune.add_argument_group("the choice")
    target = goal.add_mutually_exclusive_group()
    target.add_argument("--target-ttft", default="100ms", help="TTFT p99 target (default: %(default)s)")
    target.add_argument(
        "--max-throughput",
        action="store_true",
        help="choose the knee of the throughput curve instead of a latency target",
    )
    goal.add_argument(
        "--tolerance",
        default=f"{DEFAULT_TOLERANCE:.0%}",
        help="how far above the target a rung may be (default: %(default)s)",
    )
    goal.add_argument(
        "--min-gain",
        default=f"{DEFAULT_MIN_GAIN:.0%}",
        help="with --max-throughput, the gain a larger batch must bring (default: %(default)s)",
    )


def _add_results(tune: argparse.ArgumentParser) -> None:
    out = tune.add_argument_group("results")
    out.add_argument("--prometheus", metavar="URL", help="Prometheus to read NPU utilization from")
    out.add_argument(
        "--npu-query",
        metavar="PROMQL",
        help="NPU utilization (0..1) to average per rung (default with -f: the catalog's "
        "npu_utilization of replica 0)",
    )
    out.add_argument(
        "--png", type=Path, default=Path("tune.png"), help="the curve's PNG (default: %(default)s)"
    )
    out.add_argument("--json", type=Path, help="also write the table and the choice as JSON here")
    out.add_argument(
        "--dry-run",
        action="store_true",
        help="leave the fleet as it was and print the patch instead of applying it",
    )
    out.add_argument(
        "--rollout-timeout", default="10m", help="how long one rung's rollout may take (default: %(default)s)"
    )


def cmd_tune(args: argparse.Namespace) -> int:
    from .fleet import FleetError
    from .run import run

    try:
        plan, title = _plan(args)
    except (ValueError, FleetError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not available():
        print(f"error: {BENCH_CLIENT_INSTALL_HINT}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"tuning {title}: ladder {', '.join(r.label for r in plan.rungs)}; load {plan.load.describe()}; "
        f"goal {plan.goal.describe()}"
    )
    for note in plan.notes:
        print(f"  {note}")
    try:
        with _Bars(len(plan.rungs)) as bars:
            outcome = run(plan, bars.progress())
    except (ClientError, FleetError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    print()
    print(format_table(outcome.rows, outcome.choice.row))
    for note in outcome.notes:
        print(note)
    print()
    print(("chosen: " if outcome.choice.met else "no rung met the goal: ") + outcome.choice.reason)
    print(f"table {outcome.table_hash}")
    if outcome.rows:
        from .plot import write_png

        print(f"curve: {write_png(outcome.rows, outcome.choice.row, plan.goal, args.png, title)}")
    if outcome.patch is not None:
        if outcome.written:
            print(
                f"written: spec.batching {json.dumps(outcome.patch['spec']['batching'], sort_keys=True)} "
                f"and status.tuning on {plan.fleet.namespace}/{plan.fleet.name}"
            )
        else:
            kind = (
                "kubectl patch ainf NAME --type merge -p"
                if plan.fleet is None
                else (f"kubectl patch ainf {plan.fleet.name} -n {plan.fleet.namespace} --type merge -p")
            )
            print(f"patch (not applied): {kind} '{json.dumps(outcome.patch, sort_keys=True)}'")
    if args.json:
        report = {
            "rows": [asdict(r) for r in outcome.rows],
            "choice": asdict(outcome.choice.row) if outcome.choice.row else None,
            "reason": outcome.choice.reason,
            "tableHash": outcome.table_hash,
            "patch": outcome.patch,
            "written": outcome.written,
            "notes": outcome.notes,
        }
        args.json.write_text(json.dumps(report, indent=1))
    return EXIT_OK if outcome.choice.met else EXIT_FAILED


def _plan(args: argparse.Namespace):
    from .run import Plan

    if not args.file and not args.endpoint:
        raise ValueError("name a fleet (-f FLEET.yaml) or an endpoint (--endpoint URL)")
    fleet = spec = None
    if args.file:
        fleet, spec = _fleet(args)
    elif args.try_adaptive:
        raise ValueError("--try-adaptive changes the engine's flags, so it needs a fleet (-f FLEET.yaml)")
    model = args.model or (spec.model.name if spec else None)
    if not model:
        raise ValueError("--endpoint alone needs --model (the served model name requests carry)")
    engine = args.engine or (spec.engine.type if spec else engine_types()[0])
    chip = args.chip or (spec.hardware.chip if spec else None)
    sizes = parse_ladder(args.ladder)
    notes: list[str] = []
    if not args.no_round:
        sizes, notes = rounded_ladder(sizes, chip)
    if args.max_throughput:
        goal = Goal(None, min_gain=parse_threshold(args.min_gain))
    else:
        goal = Goal(parse_duration(args.target_ttft), tolerance=parse_threshold(args.tolerance))
    load = Load(
        request_rate=args.request_rate,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        range_ratio=args.range_ratio,
        prompts_per_slot=args.prompts_per_slot,
    )
    plan = Plan(
        rungs=rungs(sizes, engine, args.try_adaptive),
        goal=goal,
        load=load,
        model=model,
        engine=engine,
        endpoint=args.endpoint,
        fleet=fleet,
        port=spec.engine.port if spec else None,
        tokenizer=check_tokenizer(args.tokenizer) if args.tokenizer else None,
        prometheus=args.prometheus,
        npu_query=args.npu_query,
        dry_run=args.dry_run or fleet is None,
        rollout_timeout=parse_duration(args.rollout_timeout),
        notes=notes,
        repeats=max(1, args.repeats),
        settle_seconds=parse_duration(args.settle),
    )
    title = f"{fleet.namespace}/{fleet.name}" if fleet else args.endpoint
    return plan, title


def _fleet(args: argparse.Namespace):
    from ..api.v1alpha1 import AscendInference
    from ..kube import Kube
    from .fleet import Fleet

    documents = [d for d in yaml.safe_load_all(Path(args.file).read_text()) if d]
    fleets = [d for d in documents if d.get("kind") == "AscendInference"]
    if len(fleets) != 1:
        raise ValueError(f"{args.file} holds {len(fleets)} AscendInference documents; tune needs exactly one")
    meta = fleets[0].get("metadata") or {}
    namespace = meta.get("namespace") or args.namespace or "default"
    try:
        kube = Kube.connect(args.kubeconfig, args.context)
    except Exception as error:  # kubeconfig loading raises several unrelated types
        raise ValueError(
            f"cannot find cluster credentials ({error}); pass --kubeconfig, or use --endpoint"
        ) from None
    fleet = Fleet(kube, namespace, meta.get("name", ""))
    stored: AscendInference = fleet.read()
    return fleet, stored.spec


class _Bars:
    """Two rich progress bars: the ladder, and the current rung's requests (from the client's own count)."""

    def __init__(self, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=False,
        )
        self.ladder = self.bars.add_task("ladder", total=total)
        self.rung = self.bars.add_task("", total=None, visible=False)
        self.label = ""

    def __enter__(self) -> _Bars:
        self.bars.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bars.__exit__(*exc)

    def progress(self):
        from .run import Progress

        def started(rung, index, total):
            self.label = f"batch {rung.label}"
            self.bars.update(
                self.rung, description=f"{self.label}: starting", completed=0, total=None, visible=True
            )

        def phase(text):
            self.bars.update(self.rung, description=f"{self.label}: {text}")

        def requests(done, total):
            self.bars.update(self.rung, description=f"{self.label}: requests", completed=done, total=total)

        def done(row):
            self.bars.console.print(
                f"  batch {row.label:>4}: {row.tokens_per_second:7.0f} tokens/s, "
                f"TTFT p50 {row.ttft_p50_ms:4.0f} ms p99 {row.ttft_p99_ms:4.0f} ms, "
                f"E2E p99 {row.e2e_p99_ms:5.0f} ms"
            )
            self.bars.advance(self.ladder)

        return Progress(started, phase, requests, done)
