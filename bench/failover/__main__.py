"""``python -m bench.failover``: a node under one of two replicas dies, then the leading endpoint picker does.

Each run starts a real control plane whose controller manager gives a silent node ``grace`` seconds
(``--node-monitor-grace-period``), applies a two-replica inference spread over nodes with
``spec.availability``, waits until both replicas serve, then cuts the power of one replica's node and times,
through the API: the node marked ``Unknown``, the dead replica out of service (its leader ``Ready=False``, which
a Service and the InferencePool's picker go by), its pod evicted by the taint manager, and, once the node is
tainted out of service as an administrator does for a node known to be down, the replica serving again on
another node (``replica_restored_s``, the baseline run's). The baseline is the
upstream default grace period (50 s) in the same run; the floor of each run is its grace period less the age of
the node's last heartbeat at the cut, which no controller can beat.

Then (unless ``--no-picker``) one more cluster runs a pool with two pickers under steady client traffic and kills
the leading picker (:mod:`bench.failover.picker`); its floor is the picker Lease's remaining life. Last (unless
``--no-npu``) an NPU breaks under one of two replicas and the default rule replaces it (:mod:`bench.failover.npu`),
once per control-loop interval; its floor is the rule's window and the drain.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ascend_fleet.api.crd import crd
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.devcluster.real.nodefailure import NodeFailure, kill_serving_node, serving_leaders
from ascend_fleet.devcluster.stack import stack
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import wait_for
from bench.failover import NAME, example, prepare_namespace, seconds
from bench.failover.npu import NpuRun, npu_report, run_npu
from bench.failover.picker import PickerRun, PlannedRun, run_routed

UPSTREAM_GRACE_SECONDS = 50  # kube-controller-manager's default --node-monitor-grace-period (1.32+)
NAMESPACE = "failover"


def inference(toleration: int) -> dict:
    """The small SGLang example with two replicas spread over nodes."""
    doc = example(NAMESPACE)
    doc["spec"].update(
        parallelism={"tensor": 2, "data": 2},
        autoscaling={"minReplicas": 2, "maxReplicas": 2},
        availability={"spread": "node", "unreachableTolerationSeconds": toleration},
    )
    return doc


@dataclass
class Run:
    grace: int
    toleration: int
    failure: NodeFailure


def run_once(grace: int, toleration: int) -> Run:
    """One cluster, one inference, one node death."""
    with stack(
        real=True,
        nodes=3,
        npus_per_node=16,
        start_seconds=0.2,
        ready_seconds=0.3,
        node_monitor_grace_seconds=grace,
        crds=[crd()],
    ) as local:
        kube = local.cluster.kube()
        prepare_namespace(kube, NAMESPACE)
        with OperatorThread(OperatorContext(OperatorSettings(), local.cluster.kube()), RunOptions()):
            kube.create(inference(toleration))
            wait_for(
                lambda: len(set(serving_leaders(kube, NAMESPACE, NAME).values())) == 2, 120, "2 serving nodes"
            )
            failure = kill_serving_node(
                local.cluster.kubelet, kube, NAMESPACE, NAME, grace, timeout=grace + 150, out_of_service=True
            )
    return Run(grace, toleration, failure)


def baseline(runs: list[Run]) -> Run | None:
    """The run at the upstream default grace period, if it was run."""
    return next((r for r in runs if r.grace == UPSTREAM_GRACE_SECONDS), None)


def report(runs: list[Run]) -> str:
    base_run = baseline(runs)
    lines = [
        "| node grace | heartbeat age at cut | floor | node Unknown | out of service | x floor | x upstream grace "
        "| evicted (toleration) | serving replicas left | restored elsewhere (out-of-service taint) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        f = run.failure
        x_floor = f"{f.out_of_service / f.floor:.2f}x" if f.out_of_service and f.floor else "-"
        base = base_run.failure.out_of_service if base_run else None
        x_base = f"{f.out_of_service / base:.2f}x" if f.out_of_service and base else "-"
        lines.append(
            f"| {run.grace} s | {f.heartbeat_age:.1f} s | {f.floor:.1f} s | {seconds(f.node_unknown)} | "
            f"{seconds(f.out_of_service)} | {x_floor} | {x_base} | {seconds(f.evicted)} ({run.toleration} s) | "
            f"{f.fewest_survivors} | {seconds(f.restored)} ({seconds(f.tainted)}) |"
        )
    return "\n".join(lines)


# The keys for what this bench does not measure yet (the node runs send no client traffic, no operator
# is killed): written as null so a reader never takes a missing figure for zero.
NOT_MEASURED = (
    "node_failover_s",
    "failed_requests_node",
    "operator_takeover_s",
)


def picker_report(run: PickerRun) -> str:
    f = run.failover
    again = seconds(run.served_again)
    x_floor = f"{run.served_again / f.floor:.2f}x" if run.served_again and f.floor else "-"
    return "\n".join(
        [
            "| picker Lease floor | standby leads | answers again (client) | x floor | failed requests | sent |",
            "|---|---|---|---|---|---|",
            f"| {f.floor:.1f} s | {f.seconds:.1f} s | {again} | {x_floor} | {run.failed} | {run.sent} |",
        ]
    )


def planned_report(run: PlannedRun) -> str:
    rows = [f"| {op} | {run.removed[op]} | {run.failed[op]} | {run.sent[op]} |" for op in run.failed]
    header = "| planned operation | engine pods replaced or removed | failed requests | sent |"
    return "\n".join([header, "|---|---|---|---|", *rows])


def as_json(
    runs: list[Run],
    picker: PickerRun | None,
    planned: PlannedRun | None = None,
    npu: Sequence[NpuRun] = (),
) -> dict:
    """The measured runs (nodes and NPU faults: server side, the leader's Ready condition; picker: client
    side), and null for the keys not measured. ``npu_unhealthy_replaced_s`` is the first NPU run's (the
    default control interval); ``replica_restored_s`` the baseline node run's."""
    base_run = baseline(runs)
    return {
        **dict.fromkeys(NOT_MEASURED),
        "replica_restored_s": round(base_run.failure.restored, 2)
        if base_run and base_run.failure.restored
        else None,
        "npu_unhealthy_replaced_s": round(npu[0].restored, 2) if npu and npu[0].restored else None,
        "npu_runs": [
            {
                "control_interval_s": run.interval,
                "floor_s": run.floor,
                "decided_s": run.decided,
                "placed_s": run.placed,
                "restored_s": run.restored,
                "moved_node": run.moved,
                "serving_replicas_left": run.fewest_serving,
            }
            for run in npu
        ],
        "picker_failover_s": None
        if picker is None or picker.served_again is None
        else round(picker.served_again, 2),
        "failed_requests_picker": None if picker is None else picker.failed,
        "picker_lease_floor_s": None if picker is None else round(picker.failover.floor, 2),
        **{
            f"failed_requests_{op}": None if planned is None else planned.failed.get(op)
            for op in ("scale_in", "restart", "rollout")
        },
        "node_runs": [
            {
                "node_grace_s": run.grace,
                "toleration_s": run.toleration,
                "heartbeat_age_s": round(run.failure.heartbeat_age, 2),
                "floor_s": round(run.failure.floor, 2),
                "node_unknown_s": run.failure.node_unknown,
                "node_out_of_service_s": run.failure.out_of_service,
                "node_evicted_s": run.failure.evicted,
                "serving_replicas_left": run.failure.fewest_survivors,
                "node_tainted_out_of_service_s": run.failure.tainted,
                "node_replica_restored_s": run.failure.restored,
            }
            for run in runs
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--grace",
        default=f"{UPSTREAM_GRACE_SECONDS},20",
        help="node monitor grace periods to run, comma-separated (seconds; the first 50 is the baseline)",
    )
    parser.add_argument(
        "--toleration", type=int, default=5, help="spec.availability.unreachableTolerationSeconds"
    )
    parser.add_argument(
        "--no-picker", action="store_true", help="skip the routed run (planned operations, picker death)"
    )
    parser.add_argument(
        "--npu-interval",
        default="15,5",
        help="control-loop intervals of the NPU-fault runs, comma-separated (seconds; the first, the default "
        "15, gives npu_unhealthy_replaced_s)",
    )
    parser.add_argument("--no-npu", action="store_true", help="skip the NPU-fault runs")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    runs = []
    for grace in (int(g) for g in args.grace.split(",")):
        print(f"node grace {grace} s ...", file=sys.stderr, flush=True)
        runs.append(run_once(grace, args.toleration))
    print(report(runs))
    picker = planned = None
    if not args.no_picker:
        print(
            "planned operations, then the leading picker killed, under traffic ...",
            file=sys.stderr,
            flush=True,
        )
        planned, picker = run_routed()
        print()
        print(planned_report(planned))
        print()
        print(picker_report(picker))
    npu = []
    if not args.no_npu:
        for interval in (float(i) for i in args.npu_interval.split(",")):
            print(f"an NPU breaks, control interval {interval:g} s ...", file=sys.stderr, flush=True)
            npu.append(run_npu(interval))
        print()
        print(npu_report(npu))
    if args.json:
        Path(args.json).write_text(json.dumps(as_json(runs, picker, planned, npu), indent=2) + "\n")
    print(
        f"\n{len(runs) + len(npu) + (picker is not None)} runs in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    missed = unseen(runs, picker, npu)
    if missed:
        print("not seen within the timeout: " + "; ".join(missed), file=sys.stderr)
    return 1 if missed else 0


def unseen(runs: list[Run], picker: PickerRun | None, npu: Sequence[NpuRun]) -> list[str]:
    """The failovers that did not happen: a bench that prints "not seen" must not exit 0."""
    missed = [
        f"node grace {r.grace} s: the dead replica out of service"
        for r in runs
        if r.failure.out_of_service is None
    ]
    missed += [
        f"node grace {r.grace} s: the replica restored elsewhere" for r in runs if r.failure.restored is None
    ]
    if picker is not None and picker.served_again is None:
        missed.append("answers after the picker's death")
    missed += [f"NPU run at {r.interval:g} s: the replica serving again" for r in npu if r.restored is None]
    return missed


if __name__ == "__main__":
    sys.exit(main())
