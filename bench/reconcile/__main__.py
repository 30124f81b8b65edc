"""bench/reconcile: N AscendInferences; convergence time, the operator's API requests and memory.

    python -m bench.reconcile [--objects 100] [--replicas 2] [--idle 60] [--start-seconds 0.2] [--real] [--skip-emulator]
                              [--save FILE]
    python -m bench.reconcile --table FILE [--table FILE ...]

Prints, for the local emulator (and with ``--real`` the real control plane, side by side), the time until
every object reports all replicas Ready, the operator's API requests per object against the minimum a
controller needs (the children it must create plus one status write), split by kind, the write requests
made during an idle period after convergence (the goal is 0), and the operator's memory per object.

The fixed minimum counts one status write, but a pod that takes longer to start than the operator's
status hold is a real state a user sees ("0 of 1 replicas ready", then Ready). So the bench also records
what every status write said and prints the status states written per object (writes whose content,
timestamps aside, differs from the object's previous write), the writes that repeated the previous one
(the goal is 0), the children written more than once (goal 0), and the ratio of writes to the minimum for
what happened: the children plus one write per status state.

The operator runs in a process of its own (``bench.reconcile.operator_side``) with production timers; its
client counts what it sends (kopf's per-kind lists and watches are not counted; they do not grow with
objects), so both backends are counted the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NoReturn

import yaml

from ascend_fleet.api import names

from ..backends import NAMES, backend
from .operator_side import STOP_SECONDS

ROOT = Path(__file__).resolve().parents[2]
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class Run:
    backend: str
    objects: int
    converged: float
    counts: dict[str, int]
    idle_counts: dict[str, int]
    idle_seconds: float
    rss_before: float
    rss_after: float
    peak: float
    statuses: dict = field(default_factory=dict)  # what the status writes said (operator_side.take_statuses)

    def total(self) -> int:
        return sum(n for k, n in self.counts.items() if not k.startswith("WATCH"))

    def writes(self) -> int:
        return sum(n for k, n in self.counts.items() if k.startswith(WRITES))

    def idle_writes(self) -> int:
        return sum(n for k, n in self.idle_counts.items() if k.startswith(WRITES))


class OperatorProcess:
    def __init__(self, connect: list[str]):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.reconcile.operator_side", *connect],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ready = self._answer()

    def _answer(self) -> dict:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the operator process ended early")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, BrokenPipeError):
            self.ask("quit")
        self.process.wait(STOP_SECONDS + 60)


def template(replicas: int) -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "sglang-small.yaml").read_text())
    doc["spec"]["parallelism"]["data"] = replicas
    doc["spec"]["model"].pop("volume", None)  # no PersistentVolumeClaim to provide on either backend
    return doc


def converge(real: bool, args: argparse.Namespace) -> Run:
    doc = template(args.replicas)
    with backend(real, args.objects * args.replicas, npus_per_pod=2, start_seconds=args.start_seconds) as api:
        operator = OperatorProcess(api.connect_args)
        try:
            time.sleep(2.0)  # kopf's initial lists and watches settle before counting
            operator.ask("mark")
            started = time.monotonic()
            for i in range(args.objects):
                obj = yaml.safe_load(yaml.safe_dump(doc))
                obj["metadata"] = {"name": f"llm-{i:05d}", "namespace": "default"}
                api.kube.create(obj)
            while True:
                polled = time.monotonic()
                items = api.kube.list(names.KIND, "default")
                ready = sum(
                    1
                    for o in items
                    if (o.get("status") or {}).get("readyReplicas") == args.replicas
                    and (o.get("status") or {}).get("updatedReplicas") == args.replicas
                )
                if args.verbose:
                    print(
                        f"  [{api.name}] ready {ready}/{args.objects} at {polled - started:.0f} s", flush=True
                    )
                if ready == args.objects:
                    break
                # Listing 10,000 objects is work for the API server too: poll at most a fifth of the time.
                time.sleep(max(1.0, 4 * (time.monotonic() - polled)))
            converged = time.monotonic() - started
            time.sleep(2.0)  # the last status writes land
            at_convergence = operator.ask("report")
            time.sleep(args.idle)
            idle = operator.ask("report")
        finally:
            operator.close()
    print(f"  [{api.name}] converged in {converged:.1f} s", flush=True)
    return Run(
        api.name,
        args.objects,
        converged,
        at_convergence["counts"],
        idle["counts"],
        args.idle,
        operator.ready["rss_mib"],
        at_convergence["rss_mib"],
        idle["peak_rss_mib"],
        at_convergence["statuses"],
    )


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds to watch after convergence")
    parser.add_argument("--real", action="store_true", help="the real control plane too, rows side by side")
    parser.add_argument(
        "--start-seconds",
        type=float,
        default=0.2,
        help="how long a simulated engine takes to start (default 0.2; real engines take minutes)",
    )
    parser.add_argument(
        "--skip-emulator",
        action="store_true",
        help="the real control plane only (with --save, for --table to print beside an emulator run)",
    )
    parser.add_argument("--verbose", action="store_true", help="print progress while converging")
    parser.add_argument("--save", type=Path, help="write this run's results to a JSON file")
    parser.add_argument(
        "--table",
        type=Path,
        action="append",
        default=[],
        help="run nothing: print the runs saved in these files side by side (a 10,000-object run of both "
        "backends takes about half an hour, so each may be run on its own with --save)",
    )
    return parser


def saved_runs(args: argparse.Namespace, fail: Callable[[str], NoReturn]) -> list[Run]:
    """The runs saved in ``--table`` files; sets the shape and idle seconds they were measured with."""
    runs: list[Run] = []
    shapes = set()
    for path in args.table:
        try:
            saved = json.loads(path.read_text())
            shapes.add((saved["objects"], saved["replicas"]))
            runs += [Run(**r) for r in saved["runs"]]
        except (OSError, ValueError, KeyError, TypeError) as error:
            fail(f"{path}: not a run saved by --save ({error!r})")
    if len(shapes) != 1:
        fail(f"the saved runs differ in --objects and --replicas: {sorted(shapes)}")
    (args.objects, args.replicas), args.idle = shapes.pop(), runs[0].idle_seconds
    return runs


def report(args: argparse.Namespace, runs: list[Run]) -> None:
    """The runs side by side, then the status sequences each wrote."""
    children = args.replicas + 3  # pods + serving Service + headless Service + PDB
    minimum = children + 1  # ... and one status write
    print(
        f"\nobjects: {args.objects} x {args.replicas} replicas (1 pod each), operator with default timers; "
        f"minimum {minimum} writes per object ({children} children + 1 status write)"
    )
    width = max(len(r.backend) for r in runs) + 2
    header = "".join(f"{r.backend:>{width}}" for r in runs)

    def row(label: str, values: list[str]) -> None:
        print(f"{label:<44}" + "".join(f"{v:>{width}}" for v in values))

    print(f"{'':<44}{header}")
    row("time to converge (all replicas Ready), s", [f"{r.converged:.1f}" for r in runs])
    row("  per object, ms", [f"{r.converged / r.objects * 1000:.0f}" for r in runs])
    row("operator API requests per object", [f"{r.total() / r.objects:.2f}" for r in runs])
    row("operator writes per object", [f"{r.writes() / r.objects:.2f}" for r in runs])
    row(f"  ratio to the minimum ({minimum})", [f"{r.writes() / r.objects / minimum:.2f}x" for r in runs])
    kinds = sorted(
        {k for r in runs for k in r.counts if not k.startswith("WATCH")},
        key=lambda k: -max(r.counts.get(k, 0) for r in runs),
    )
    for kind in kinds:
        row(f"  {kind}", [f"{r.counts.get(kind, 0) / r.objects:.2f}" for r in runs])
    row("status states written per object", [f"{r.statuses['changes'] / r.objects:.2f}" for r in runs])
    row(
        "  minimum for what happened",
        [f"{children + r.statuses['changes'] / r.objects:.2f}" for r in runs],
    )
    row(
        "  ratio of writes to it",
        [f"{r.writes() / (children * r.objects + r.statuses['changes']):.2f}x" for r in runs],
    )
    row("status writes repeating the previous (goal 0)", [str(r.statuses["repeats"]) for r in runs])
    row("status writes refused (conflict)", [str(r.statuses["conflicts"]) for r in runs])
    row("children written more than once (goal 0)", [str(r.statuses["children_written_twice"]) for r in runs])
    row(f"writes during {args.idle:.0f} s idle (goal 0)", [str(r.idle_writes()) for r in runs])
    row(
        "operator memory, MiB (before -> converged)",
        [f"{r.rss_before:.0f} -> {r.rss_after:.0f}" for r in runs],
    )
    row("  per object, KiB", [f"{(r.rss_after - r.rss_before) * 1024 / r.objects:.0f}" for r in runs])
    print("\nstatus states per object, commonest sequences (ready/replicas Ready-reason/Progressing-reason):")
    for r in runs:
        for sequence, count in r.statuses["sequences"]:
            print(f"  [{r.backend}] {count:>6} x  {sequence}")
        for child, n in r.statuses["children_twice_examples"]:
            print(f"  [{r.backend}] written {n} times: {child}")


def main() -> None:
    parser = argument_parser()
    args = parser.parse_args()
    if args.table:
        runs = saved_runs(args, parser.error)
    else:
        backends = [False, True] if args.real else [False]
        if args.skip_emulator:
            backends = [True]
        runs = [converge(real, args) for real in backends]
    if args.save:
        args.save.write_text(
            json.dumps(
                {"objects": args.objects, "replicas": args.replicas, "runs": [asdict(r) for r in runs]},
                indent=1,
            )
        )
    runs.sort(key=lambda r: list(NAMES.values()).index(r.backend))
    report(args, runs)


if __name__ == "__main__":
    main()
