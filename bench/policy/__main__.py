"""``python -m bench.policy``: the comparison table for every built-in trace and a verdict in plain words.

Each trace (a simulated day by default) runs through four policies on the seeds' example fleet: a
static fleet sized for the trace's peak, a Kubernetes HPA, the project's rules and the same rules
without fragmentation restarts. The output is Markdown, so it can go into the docs as it is.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from ascend_fleet.simulate.flow import ROUTINGS
from ascend_fleet.simulate.model import simulate
from ascend_fleet.simulate.plot import PlotUnavailable, write_runs_png
from ascend_fleet.simulate.report import LOSE, WIN, Summary, outcome, summarize, table, verdict
from ascend_fleet.simulate.run import fleet_config, load_spec, make_policy, run_all
from ascend_fleet.simulate.traces import BUILT_IN, HOUR, generate


@dataclass(frozen=True)
class TraceReport:
    """One trace's numbers, computed in a worker process."""

    name: str
    description: str
    requests: int
    rate: float
    summaries: list[Summary]
    seconds: float
    png: str
    routing: list[tuple[str, Summary]]


def run_trace(name: str, hours: float, seed: int, spec_path: str | None, png_dir: str | None) -> TraceReport:
    """Generate one built-in trace and run every policy on it."""
    spec = load_spec(spec_path)
    shape = BUILT_IN[name]
    trace = generate(shape, hours * HOUR, seed)
    started = time.monotonic()
    results = run_all(spec, trace)
    seconds = time.monotonic() - started
    png = ""
    if png_dir:
        try:
            png = str(write_runs_png(results, Path(png_dir) / f"policy-{name}.png", f"{name}, seed {seed}"))
        except PlotUnavailable as error:
            png = f"no PNG: {error}"
    # The rules policy once more under each routing layer (simulate/flow.py).
    routing = []
    for mode in ROUTINGS:
        policy, config = make_policy("rules", spec, trace, fleet_config(spec))
        routing.append((mode, summarize(simulate(replace(config, routing=mode), trace, policy))))
    return TraceReport(
        name,
        shape.description,
        len(trace),
        trace.mean_rate(),
        [summarize(r) for r in results],
        seconds,
        png,
        routing,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.policy", description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours per trace (default: 24)")
    parser.add_argument("--seed", type=int, default=1, help="trace seed (default: 1)")
    parser.add_argument("--spec", help="AscendInference YAML (default: examples/vllm-tp4-pp2-dp2.yaml)")
    parser.add_argument("--png-dir", help="write policy-<trace>.png here (needs matplotlib)")
    parser.add_argument("--jobs", type=int, default=1, help="traces simulated in parallel (default: 1)")
    args = parser.parse_args(argv)

    names = list(BUILT_IN)
    jobs = [(name, args.hours, args.seed, args.spec, args.png_dir) for name in names]
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            reports = list(pool.map(run_trace, *zip(*jobs, strict=True)))
    else:
        reports = [run_trace(*job) for job in jobs]

    print(f"# Policy comparison: {args.hours:g} simulated hours per trace, seed {args.seed}\n")
    for report in reports:
        per_policy = report.seconds / max(1, len(report.summaries))
        print(f"## {report.name}: {report.description}\n")
        print(
            f"{report.requests} requests ({report.rate:.2f} req/s); simulated in {report.seconds:.1f}s "
            f"({per_policy:.1f}s per policy)\n"
        )
        print(table(report.summaries))
        print()
        for sentence in verdict(report.summaries):
            print(f"- {sentence}")
        if report.png:
            print(f"\n{report.png}")
        print()
        print(routing_table(report.routing))
        print()
    print(plain_verdict(reports))
    return 0


def routing_table(rows: list[tuple[str, Summary]]) -> str:
    """The rules policy under each routing, with ratios to the plain Service."""
    base = rows[0][1]
    lines = [
        "Routing (rules policy): service = random choice, pool = the endpoint picker's choice (fewest "
        "outstanding requests), classes = pool + flow control by the seeds' classes (short first; "
        "seed-order: long first; engine-priority: the class's priority also in the engines' queues)",
        "",
        "| routing | first token over 1 s | vs service | TTFT p50 | TTFT p99 | failed | NPU-hours |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, s in rows:
        ratio = f"{s.slow_share / base.slow_share:.2f}x" if base.slow_share >= 0.001 else "n/a"
        lines.append(
            f"| {mode} | {s.slow_share * 100:.1f}% | {ratio} | {s.first_token_p50:.2f}s | "
            f"{s.first_token_p99:.2f}s | {s.failed} | {s.npu_hours:.0f} |"
        )
    return "\n".join(lines)


def plain_verdict(reports: list[TraceReport]) -> str:
    """Where the rules win, where they lose, and where it is a trade-off, across all traces."""
    groups: dict[str, list[str]] = {WIN: [], LOSE: [], "other": []}
    for report in reports:
        rules = next(s for s in report.summaries if s.policy == "rules")
        for other in report.summaries:
            if other is rules:
                continue
            result = outcome(rules, other)
            line = (
                f"{report.name} vs {other.policy}: NPU-hours {rules.npu_hours:.0f} vs {other.npu_hours:.0f}, "
                f"over 1 s {rules.slow_share * 100:.1f}% vs {other.slow_share * 100:.1f}%"
            )
            groups[result if result in (WIN, LOSE) else "other"].append(f"- {result}: {line}")
    parts = ["## Verdict: the rules policy against each other policy", ""]
    for title, key in (
        ("Rules win (cheaper or faster, and no worse on the other)", WIN),
        ("Rules lose (dearer or slower, and no better on the other)", LOSE),
        ("Trade-offs and draws", "other"),
    ):
        parts += [f"{title}:", *(groups[key] or ["- none"]), ""]
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    sys.exit(main())
