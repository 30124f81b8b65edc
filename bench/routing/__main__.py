"""``python -m bench.routing``: how much of the long tail each routing layer removes, on one mixed-length trace.

One run; per load one trace, replayed against six fleets of the same two replicas (simulated engines on the
real control plane, all requests through upstream Envoy):

- (a) ``service``: Envoy picks a replica at random, as kube-proxy does for the plain ClusterIP Service;
  engines first come, first served;
- (b) ``pool``: ``routing.mode: inferencePool`` with one class: the endpoint picker (queue, KV-cache and
  prefix scorers, flow control) chooses the replica;
- (c) ``pool+classes``: (b) with the seeds' three classes by prompt length, short prompts first (the default
  classes). The client sends prompts only: the classifier in front of the picker names each request's class;
- (d) ``pool+seed-order``: (c) in the order the seed's code wrote, long prompts first;
- (e) ``pool+classes+priority``: (c) with ``scheduling.priority``: the engines schedule by the request's
  ``priority``, which the classifier writes from the class;
- (f) ``pool+adaptive``: (b) with ``batching.minBatchSize`` and ``ttftTarget``: the picker adapts each
  engine's in-flight limit between 2 and its 4 slots to hold first tokens within 500 ms, where (b) holds the
  fixed limit.

The trace has the seeds' length mix (log-normal prompts, median 512 tokens, as the fleet simulator) with
answers an eighth of the simulator's (median 25 tokens), so that a request's own decode stays under a second
and the time over one second is mostly waiting: the seeds' "requests slower than 1 s". Arrivals are Poisson at
each ``--loads`` value times what the fleet serves. Per fleet and load: the share of requests over 1 s end to
end (all, and per class) and by first token, TTFT p50/p99, throughput, shed requests; per load the floor: the
share over 1 s of the same requests alone on an idle engine, from the engine's batch curve. Numbers come from
the client's clock; the run is paced in real time. A fleet that serves nothing, or a figure that is not a
number, fails the run (exit 1). A second table sets each fleet against the run's own baseline (the Service) and
against the idle fleet: its share over 1 s over the Service's and over the floor, its end-to-end p99 over the
p99 of the same requests alone on an idle engine.

``--engines vllm`` runs, after the simulated fleets, four (service, pool, pool+classes, pool+adaptive) on two real
``vllm serve`` engines of the tiny model (bench/routing/real.py) and prints their two tables beside the
simulated ones. The trace is scaled to what two real engines on a 2-core machine serve: the fleet's capacity is
measured first (the trace's requests in a closed loop, 4 in flight per engine, as the simulated capacity is 4
slots per engine on the batch curve), the loads are shares of that, prompts are cut to the tiny model's 4096
tokens of context, and the floor is measured by sending each request of the trace alone to an idle engine.
Only the arrival rate and the longest prompts change; the mix of lengths, the answers and the 1 s line are the
simulated run's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from ascend_fleet.render import render_all, validate
from ascend_fleet.simulate.curve import BatchCurve
from ascend_fleet.simulate.routing import service_time
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.dataplane import Envoy
from ascend_fleet_dev.real.realcluster import RealCluster

from ..machine import machine_load
from .figures import (
    REPLICAS,
    SLOTS,
    Against,
    LoadRun,
    Repeats,
    Request,
    Result,
    against_of,
    as_json,
    failures,
    fleet_rate,
    ratio_report,
    requests_of,
    routing_report,
    routing_trace,
    spread_report,
    with_spread,
)
from .fleets import FLEETS, UPSTREAM_CRDS, answers, kubectl, replay, spec_doc, start_data_plane

LOADS = (0.5, 0.75, 0.9, 1.05)
ENGINE_KINDS = ("simulated", "vllm")
REAL_FLEETS = ("service", "pool", "pool+classes", "pool+adaptive")


def run_fleet(cluster: RealCluster, mode: str, requests: list[Request], workdir: Path) -> Result:
    """One fleet: render and apply it, start its data plane, replay the trace, tear it all down."""
    namespace = f"bench-{mode.replace('+', '-')}-{uuid.uuid4().hex[:4]}"
    kubectl(cluster, "create", "namespace", namespace)
    engines = SimulatedEngines(Scenario.constant(0.0))
    cluster.kubelet.add_listener(engines)
    processes: list = []
    try:
        obj = validate(spec_doc(namespace, mode)).obj
        objects = render_all(obj)
        kubectl(cluster, "apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        leaders = [o["metadata"]["name"] for o in objects
                   if o["kind"] == "Pod" and o["metadata"]["labels"][names.LABEL_ROLE] == names.ROLE_LEADER]  # fmt: skip
        wait_for(
            lambda: all(engines.api_endpoint(namespace, n) for n in leaders),
            60,
            "serving engines",
            interval=0.2,
        )
        if obj.spec.routing.mode == "inferencePool":
            processes = start_data_plane(cluster, obj, mode, workdir)
        else:
            processes = [Envoy(endpoints=[engines.api_endpoint(namespace, n) for n in leaders]).start()]
        wait_for(
            lambda: answers(processes[-1].url, obj, mode),
            90,
            f"fleet {mode} to answer a request",
            interval=0.2,
        )
        time.sleep(2.0)  # the picker's first scrapes
        began = time.monotonic()
        outcomes = asyncio.run(replay(processes[-1].url, requests, obj, mode))
        return Result(mode, list(outcomes), time.monotonic() - began)
    finally:
        for process in reversed(processes):
            process.stop()
        cluster.kubelet.remove_listener(engines)
        engines.close()
        kubectl(cluster, "delete", "namespace", namespace, "--wait=false")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=12.0, help="length of each load's trace (default 12)"
    )
    parser.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS),
                        help="arrival rates over the fleet's capacity (default 0.5,0.75,0.9,1.05)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fleets", default=None,
                        help=f"simulated fleets (default: all six; with --engines vllm: {','.join(REAL_FLEETS)})")  # fmt: skip
    parser.add_argument("--engines", choices=ENGINE_KINDS, default="simulated",
                        help="simulated: the simulated fleets only; vllm: also four fleets on real vLLM engines")  # fmt: skip
    parser.add_argument("--real-fleets", default=",".join(REAL_FLEETS),
                        help="fleets on the real engines (default: %(default)s)")  # fmt: skip
    parser.add_argument("--real-seconds", type=float, default=20.0,
                        help="length of each load's trace on the real engines (default 20)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=3,
                        help="runs of each fleet at each load on the same trace (default 3): the tables show each "
                             "cell's median run, a third table every run and the spread")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs: at least 1")
    if args.fleets is None:
        args.fleets = ",".join(REAL_FLEETS if args.engines == "vllm" else FLEETS)
    args.loads = [float(x) for x in args.loads.split(",")]
    for option in ("fleets", "real_fleets"):
        chosen = getattr(args, option).split(",")
        unknown = [f for f in chosen if f not in FLEETS]
        if unknown:
            parser.error(
                f"--{option.replace('_', '-')}: unknown fleet {', '.join(unknown)} (known: {', '.join(FLEETS)})"
            )
        setattr(args, option, chosen)
    if args.engines == "vllm" and "service" not in args.real_fleets:
        parser.error("--real-fleets must include service: it is the baseline the real fleets are set against")
    return args


def simulated(args: argparse.Namespace, workdir: Path) -> tuple[Repeats, dict, dict, float]:
    """Every simulated fleet at every load, ``args.runs`` times: the runs, the rates, the idle fleet, capacity.

    The repeats of one load take turns (every fleet once, then every fleet again), so that a slow spell of
    the machine falls on all fleets alike rather than on one fleet's runs.
    """
    curve = BatchCurve()
    capacity = fleet_rate(routing_trace(600, 10.0, args.seed), curve, REPLICAS)
    rates = {load: load * capacity for load in args.loads}
    repeats, idle = Repeats(), {}
    with RealCluster(nodes=REPLICAS, start_seconds=0.2, ready_seconds=0.3) as cluster:
        kubectl(cluster, "apply", "--server-side", "-f", str(UPSTREAM_CRDS))
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(UPSTREAM_CRDS))
        for load in args.loads:
            trace = routing_trace(args.seconds, rates[load], args.seed)
            requests = requests_of(trace)
            idle[load] = against_of([service_time(r.prompt, r.output, curve) for r in requests])
            for run in range(1, args.runs + 1):
                for mode in args.fleets:
                    print(f"load {load:g}: fleet {mode}, run {run} of {args.runs}, {len(requests)} requests ...",
                          file=sys.stderr, flush=True)  # fmt: skip
                    repeats.add(load, mode, run_fleet(cluster, mode, requests, workdir))
    return repeats, rates, idle, capacity


def print_tables(title: str, repeats: Repeats, rates: dict, idle: dict[float, Against]) -> list[LoadRun]:
    """The three tables of one kind of engines (figures of each cell's median run, ratios, spread); the runs."""
    runs, p99 = repeats.load_runs({load: against.floor for load, against in idle.items()})
    print(title + "\n")
    print(routing_report(runs, rates))
    print()
    print(ratio_report(runs, p99, idle))
    print()
    print(spread_report(repeats))
    print()
    return runs


def main(argv: list[str] | None = None) -> int:
    """Run every fleet at every load, print the tables (and write the JSON); exit 1 on a failed fleet."""
    args = parse_args(argv)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp:
        print(machine_load(), flush=True)
        repeats, rates, idle, capacity = simulated(args, Path(tmp))
        took = time.monotonic() - began
        runs = print_tables(f"# bench/routing, simulated engines: {args.seconds:g} s per load, {REPLICAS} "
                            f"replicas x {SLOTS} slots, capacity {capacity:.1f} req/s, seed {args.seed}, "
                            f"{args.runs} runs per cell (tables: each cell's median run); took {took:.0f} s",
                            repeats, rates, idle)  # fmt: skip
        simulated_json = with_spread(as_json(runs), repeats)
        written = {"simulated": simulated_json} if args.engines == "vllm" else simulated_json
        problems = failures(runs)
        if args.engines == "vllm":
            from .real import real_run

            real = real_run(args, Path(tmp))
            real_runs = print_tables(real.title(args), real.repeats, real.rates, real.idle)
            written["vllm"] = with_spread(as_json(real_runs), real.repeats)
            problems += [f"vllm: {problem}" for problem in failures(real_runs)]
        print(machine_load(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(written, indent=2) + "\n")
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
