"""``python -m bench.failover``: a node under one of two replicas dies, then a serving endpoint picker does.

Each run starts a real control plane whose controller manager gives a silent node ``grace`` seconds
(``--node-monitor-grace-period``), applies a two-replica inference spread over nodes with
``spec.availability`` behind an InferencePool (two pickers behind the pool's gateway), waits until both replicas
serve and a client's requests through the gateway are answered, then cuts the power of one replica's node (not
the first serving picker's) and times, through the API: the node marked ``Unknown``, the dead replica out of service
(its leader ``Ready=False``, which a Service and the InferencePool's picker go by), its pod evicted by the taint
manager, and, once the node is tainted out of service as an administrator does for a node known to be down,
the replica serving again on another node (``replica_restored_s``, the baseline run's). The client counts what
it saw meanwhile: when its answers were steady again after the cut (``node_failover_s``) and how many of its
requests failed until the replica was restored (``failed_requests_node``). The baseline is the upstream default
grace period (50 s) in the same run; the floor of each server-side step is its grace period less the age of
the node's last heartbeat at the cut, which no controller can beat.

Then (unless ``--no-picker``) one more cluster runs a pool with two pickers under steady client traffic and kills
one that serves (:mod:`bench.failover.picker`): both serve by default, so there is no floor to wait for; and one
more with ``leaderElection``, whose floor is the picker Lease's remaining life. Last (unless
``--no-npu``) an NPU breaks under one of two replicas and the default rule replaces it (:mod:`bench.failover.npu`),
once per control-loop interval; its floor is the rule's window and the drain. Then (unless ``--no-operator``) the
acting one of two operator processes is killed (:mod:`bench.failover.operator`); its floor is the operator
Lease's remaining life.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.real.nodefailure import NodeFailure, kill_serving_node, serving_leaders
from bench.failover import NAME, example, node_death_stack, seconds
from bench.failover.npu import NpuRun, npu_report, run_npu
from bench.failover.operator import OperatorRun, operator_report, run_operator_takeover
from bench.failover.picker import PickerRun, PlannedRun, Traffic, client_view, routed, run_routed
from bench.failover.service import ServiceRun, run_service

UPSTREAM_GRACE_SECONDS = 50  # kube-controller-manager's default --node-monitor-grace-period (1.32+)
NAMESPACE = "failover"


def inference(toleration: int, fallbacks: int = 0) -> dict:
    """The small SGLang example with two replicas spread over nodes, behind an InferencePool whose picker
    names ``fallbacks`` more endpoints for the gateway to retry on."""
    doc = example(NAMESPACE)
    doc["spec"].update(
        parallelism={"tensor": 2, "data": 2},
        autoscaling={"minReplicas": 2, "maxReplicas": 2},
        availability={"spread": "node", "unreachableTolerationSeconds": toleration},
        routing={"mode": "inferencePool", "picker": {"fallbacks": fallbacks}},
    )
    return doc


@dataclass
class Run:
    grace: int
    toleration: int
    failure: NodeFailure
    fallbacks: int = 0  # spec.routing.picker.fallbacks
    # The client's view: from the power cut to the first of STEADY answers in a row (None: not seen), and
    # the requests that failed (of those sent) from the cut until the replica served again elsewhere.
    failover: float | None = None
    failed: int = 0
    sent: int = 0
    # Requests the dead node's replica had answered before the cut: the client's traffic really reached it.
    dead_replica_answered: int = 0


def run_once(grace: int, toleration: int, fallbacks: int = 0, rate: float = 10.0) -> Run:
    """One cluster, one inference under client traffic, one node death (not the node of the first serving
    picker: a picker's death is the picker run's; the other picker may share the dying node, as in a cluster)."""
    with (
        node_death_stack(grace) as local,
        routed(local, NAMESPACE, inference(toleration, fallbacks)) as fleet,
    ):
        kube, pickers = local.cluster.kube(), fleet.pickers
        wait_for(
            lambda: len(set(serving_leaders(kube, NAMESPACE, NAME).values())) == 2, 120, "2 serving nodes"
        )
        fleet.warm()
        with Traffic(pickers, rate, NAMESPACE) as traffic:
            wait_for(traffic.steady, 60, "steady answers")
            route = pickers.route(NAMESPACE, NAME)
            assert route is not None, "routed() waits for a serving picker"
            leading_node = kube.get("Pod", NAMESPACE, route.picker)["spec"]["nodeName"]
            before = fleet.wait_spread(2)  # the dead replica's share is what the failover must move
            killed = traffic.now()
            failure = kill_serving_node(
                local.cluster.kubelet, kube, NAMESPACE, NAME, grace, timeout=grace + 150, out_of_service=True,
                spare={leading_node},
            )  # fmt: skip
    failover, _ = client_view(traffic.results, killed)
    after = [ok for t, ok in traffic.results if t >= killed]
    dead = sum(before.get(pod, 0) - 1 for pod in failure.pods if pod in before)  # less the warm-up's
    return Run(grace, toleration, failure, fallbacks, failover, after.count(False), len(after), dead)


def baseline(runs: list[Run]) -> Run | None:
    """The run at the upstream default grace period without fallbacks (the defaults), if it was run."""
    return next((r for r in runs if r.grace == UPSTREAM_GRACE_SECONDS and not r.fallbacks), None)


def report(runs: list[Run]) -> str:
    base_run = baseline(runs)
    lines = [
        "| node grace | fallbacks | heartbeat age at cut | floor | node Unknown | out of service | x floor "
        "| x upstream grace "
        "| evicted (toleration) | serving replicas left | restored elsewhere (out-of-service taint) "
        "| client: answers steadily | failed requests | sent | answered by the dead replica before |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        f = run.failure
        x_floor = f"{f.out_of_service / f.floor:.2f}x" if f.out_of_service and f.floor else "-"
        base = base_run.failure.out_of_service if base_run else None
        x_base = f"{f.out_of_service / base:.2f}x" if f.out_of_service and base else "-"
        lines.append(
            f"| {run.grace} s | {run.fallbacks} | {f.heartbeat_age:.1f} s | {f.floor:.1f} s | {seconds(f.node_unknown)} | "
            f"{seconds(f.out_of_service)} | {x_floor} | {x_base} | {seconds(f.evicted)} ({run.toleration} s) | "
            f"{f.fewest_survivors} | {seconds(f.restored)} ({seconds(f.tainted)}) | {seconds(run.failover)} | "
            f"{run.failed} | {run.sent} | {run.dead_replica_answered} |"
        )
    return "\n".join(lines)


def service_json(run: ServiceRun | None) -> dict:
    """The Service-mode run's figures (null when not run or not seen)."""
    f = run.failure if run else None
    return {
        "service_node_failover_s": None if run is None or run.failover is None else round(run.failover, 2),
        "failed_requests_service_node": None if run is None else run.failed,
        "replica_restored_untainted_s": None if f is None or f.restored is None else round(f.restored, 2),
        "service_run": None
        if run is None or f is None
        else {
            "node_grace_s": f.grace_seconds,
            "heartbeat_age_s": round(f.heartbeat_age, 2),
            "left_service_s": f.out_of_service,
            "dead_pods_gone_s": f.evicted,
            "node_unknown_s": f.node_unknown,
            "serving_replicas_left": f.fewest_survivors,
            "client_failover_s": run.failover,
            "failed_requests": run.failed,
            "sent_requests": run.sent,
            "dead_replica_answered_before": run.dead_replica_answered,
        },
    }


def service_report(run: ServiceRun) -> str:
    f = run.failure
    return "\n".join(
        [
            "| routing | node grace | heartbeat age at cut | left the Service (API) | dead pods gone "
            "| node Unknown | restored elsewhere (no taint) | serving replicas left | client: no failure after "
            "| failed requests | sent | answered by the dead replica before |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| service | {f.grace_seconds} s | {f.heartbeat_age:.1f} s | {seconds(f.out_of_service)} "
            f"| {seconds(f.evicted)} | {seconds(f.node_unknown)} | {seconds(f.restored)} | {f.fewest_survivors} "
            f"| {seconds(run.failover)} | {run.failed} | {run.sent} | {run.dead_replica_answered} |",
        ]
    )


def picker_report(runs: Sequence[PickerRun]) -> str:
    """One row per picker run: both pickers serving, or electing a leader (the leader killed)."""
    rows = []
    for run in runs:
        f = run.failover
        pickers = "leader elected" if f.killed.elects else "both serve"
        x_floor = f"{run.served_again / f.floor:.2f}x" if run.served_again and f.floor else "-"
        rows.append(
            f"| {pickers} | {f.floor:.1f} s | {f.seconds:.1f} s | {seconds(run.served_again)} | {x_floor} "
            f"| {run.failed} | {run.in_flight} | {run.sent} |"
        )
    header = (
        "| pickers | floor | another serves | answers again (client) | x floor | failed requests "
        "| in flight at the kill | sent |"
    )
    return "\n".join([header, "|---|---|---|---|---|---|---|---|", *rows])


def planned_report(run: PlannedRun) -> str:
    rows = [f"| {op} | {run.removed[op]} | {run.failed[op]} | {run.sent[op]} |" for op in run.failed]
    header = "| planned operation | engine pods replaced or removed | failed requests | sent |"
    return "\n".join([header, "|---|---|---|---|", *rows])


def as_json(
    runs: list[Run],
    picker: PickerRun | None,
    planned: PlannedRun | None = None,
    npu: Sequence[NpuRun] = (),
    operator: OperatorRun | None = None,
    elected: PickerRun | None = None,
    service: ServiceRun | None = None,
) -> dict:
    """The measured runs (nodes: client side and, per step, server side; NPU faults: server side, the
    leader's Ready condition; picker: client side, ``picker`` with both pickers serving and ``elected`` with a
    leader elected; operator: through the API), null for what was not run or not seen. ``npu_unhealthy_replaced_s`` is the first NPU run's (the default control interval);
    ``node_failover_s``, ``failed_requests_node`` and ``replica_restored_s`` the baseline node run's;
    ``service_node_failover_s``, ``failed_requests_service_node`` and ``replica_restored_untainted_s`` the
    Service-mode run's (no picker, nothing tainted)."""
    base_run = baseline(runs)
    return {
        **service_json(service),
        "operator_takeover_s": None if operator is None or operator.acts is None else round(operator.acts, 2),
        "operator_lease_taken_s": None
        if operator is None or operator.leads is None
        else round(operator.leads, 2),
        "operator_lease_floor_s": None if operator is None else round(operator.floor, 2),
        "node_failover_s": round(base_run.failover, 2)
        if base_run and base_run.failover is not None
        else None,
        "failed_requests_node": base_run.failed if base_run else None,
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
        "in_flight_requests_picker": None if picker is None else picker.in_flight,
        "picker_elected_failover_s": None
        if elected is None or elected.served_again is None
        else round(elected.served_again, 2),
        "failed_requests_picker_elected": None if elected is None else elected.failed,
        "picker_lease_floor_s": None if elected is None else round(elected.failover.floor, 2),
        **{
            f"failed_requests_{op}": None if planned is None else planned.failed.get(op)
            for op in ("scale_in", "restart", "rollout")
        },
        "node_runs": [
            {
                "node_grace_s": run.grace,
                "fallbacks": run.fallbacks,
                "toleration_s": run.toleration,
                "heartbeat_age_s": round(run.failure.heartbeat_age, 2),
                "floor_s": round(run.failure.floor, 2),
                "node_unknown_s": run.failure.node_unknown,
                "node_out_of_service_s": run.failure.out_of_service,
                "node_evicted_s": run.failure.evicted,
                "serving_replicas_left": run.failure.fewest_survivors,
                "node_tainted_out_of_service_s": run.failure.tainted,
                "node_replica_restored_s": run.failure.restored,
                "client_failover_s": run.failover,
                "failed_requests": run.failed,
                "sent_requests": run.sent,
                "dead_replica_answered_before": run.dead_replica_answered,
            }
            for run in runs
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--grace",
        default=f"{UPSTREAM_GRACE_SECONDS},20",
        help="node monitor grace periods to run, comma-separated (seconds; the first 50 is the baseline; "
        "empty: no node runs)",
    )
    parser.add_argument(
        "--toleration", type=int, default=5, help="spec.availability.unreachableTolerationSeconds"
    )
    parser.add_argument(
        "--fallbacks",
        default="1",
        help="spec.routing.picker.fallbacks of extra node runs at the first grace period, comma-separated "
        "(the node runs themselves use the default, 0; empty: none)",
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
    parser.add_argument("--no-operator", action="store_true", help="skip the operator takeover run")
    parser.add_argument(
        "--no-service", action="store_true", help="skip the Service-mode node run (no picker, no taint)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    graces = [int(g) for g in args.grace.split(",") if g]
    node_runs = [(g, 0) for g in graces] + [
        (g, int(f)) for g in graces[:1] for f in args.fallbacks.split(",") if f
    ]
    runs = []
    for grace, fallbacks in node_runs:
        print(f"node grace {grace} s, {fallbacks} fallbacks ...", file=sys.stderr, flush=True)
        runs.append(run_once(grace, args.toleration, fallbacks))
    if runs:
        print(report(runs))
    picker = planned = elected = None
    if not args.no_picker:
        print(
            "planned operations, then a serving picker killed, under traffic ...", file=sys.stderr, flush=True
        )
        planned, picker = run_routed()
        print("the leader of two electing pickers killed, under traffic ...", file=sys.stderr, flush=True)
        _, elected = run_routed(leader_election=True, planned=False)
        print()
        assert planned is not None  # run_routed runs them by default
        print(planned_report(planned))
        print()
        print(picker_report([picker, elected]))
    npu = []
    if not args.no_npu:
        for interval in (float(i) for i in args.npu_interval.split(",")):
            print(f"an NPU breaks, control interval {interval:g} s ...", file=sys.stderr, flush=True)
            npu.append(run_npu(interval))
        print()
        print(npu_report(npu))
    operator = None if args.no_operator else operator_run()
    service = None if args.no_service else service_run()
    if args.json:
        figures = as_json(runs, picker, planned, npu, operator, elected, service)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    count = len(runs) + len(npu) + sum(r is not None for r in (picker, elected, operator, service))
    print(f"\n{count} runs in {time.monotonic() - started:.0f} s", file=sys.stderr)
    missed = unseen(runs, picker, npu, operator) + unseen([], elected, []) + service_unseen(service)
    if missed:
        print("not seen within the timeout: " + "; ".join(missed), file=sys.stderr)
    return 1 if missed else 0


def unseen(
    runs: list[Run], picker: PickerRun | None, npu: Sequence[NpuRun], operator: OperatorRun | None = None
) -> list[str]:
    """The failovers that did not happen: a bench that prints "not seen" must not exit 0."""
    missed = [
        f"node grace {r.grace} s: the dead replica out of service"
        for r in runs
        if r.failure.out_of_service is None
    ]
    missed += [
        f"node grace {r.grace} s: the replica restored elsewhere" for r in runs if r.failure.restored is None
    ]
    missed += [f"node grace {r.grace} s: steady answers (client)" for r in runs if r.failover is None]
    missed += [
        f"node grace {r.grace} s: client traffic on the dead replica before the cut"
        for r in runs
        if r.sent and not r.dead_replica_answered
    ]
    if picker is not None and picker.served_again is None:
        missed.append("answers after the picker's death")
    missed += [f"NPU run at {r.interval:g} s: the replica serving again" for r in npu if r.restored is None]
    if operator is not None and operator.acts is None:
        missed.append("the standby operator acting")
    return missed


def operator_run() -> OperatorRun:
    print("the acting operator killed ...", file=sys.stderr, flush=True)
    operator = run_operator_takeover()
    print()
    print(operator_report(operator))
    return operator


def service_run() -> ServiceRun:
    print("a node dies under a Service-mode fleet, nothing tainted ...", file=sys.stderr, flush=True)
    service = run_service()
    print()
    print(service_report(service))
    return service


def service_unseen(run: ServiceRun | None) -> list[str]:
    if run is None:
        return []
    missed = []
    if run.failure.out_of_service is None:
        missed.append("service mode: the dead replica out of the Service")
    if run.failure.restored is None:
        missed.append("service mode: the replica restored elsewhere without a taint")
    if run.failover is None:
        missed.append("service mode: answers without failures (client)")
    if not run.dead_replica_answered:
        missed.append("service mode: client traffic on the dead replica before the cut")
    return missed


if __name__ == "__main__":
    sys.exit(main())
