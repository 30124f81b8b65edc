"""The operator run of ``bench.failover``: two operator processes elect one through a Lease, and the acting
one is killed.

One real control plane, two ``ascend-fleet run --leader-elect-lease`` processes (what the chart runs with
``operator.replicas: 2`` and ``operator.leaderElection.enabled``), and the small SGLang example reconciled by the
holder. The bench SIGKILLs the holder, which leaves its Lease unreleased, and deletes the fleet's engine pod in
the same instant: only an operator that acts recreates it. It times, through the API, the Lease taken by the
standby and the engine pod created again (``operator_takeover_s``).

The floor is the Lease's remaining life at the kill: its duration less the age of its last renewal. A standby
may not take it sooner, or two operators could act at once.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.api.times import parse_rfc3339
from ascend_fleet.kube import Kube, NotFound, wait_for
from ascend_fleet.kube.lease import LeaseTiming
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.real.localpods import OperatorProcess
from ascend_fleet_dev.stack import stack
from bench.failover import NAME, example, prepare_namespace, seconds

NAMESPACE = "operator-ha"
LEASE = "ascend-fleet-leader"
CANDIDATES = ("operator-a", "operator-b")
_POLL_SECONDS = 0.1


@dataclass
class OperatorRun:
    """Seconds from the SIGKILL of the holder (None: not seen within the timeout)."""

    floor: float  # the Lease's duration less its last renewal's age at the kill
    killed: str = ""  # the holder's identity
    leads: float | None = None  # the Lease held by another identity
    leader: str = ""
    acts: float | None = None  # the deleted engine pod created again by the new holder


def _lease(kube: Kube) -> dict:
    try:
        return kube.get("Lease", NAMESPACE, LEASE).get("spec") or {}
    except NotFound:
        return {}


def _engine_pods(kube: Kube) -> list[dict]:
    return kube.list("Pod", NAMESPACE, {names.LABEL_NAME: NAME})


def _ready(kube: Kube) -> bool:
    return (kube.get(names.KIND, NAMESPACE, NAME).get("status") or {}).get("readyReplicas") == 1


def _operator(kubeconfig: Path, identity: str, work: Path) -> OperatorProcess:
    args = ["run", "-n", NAMESPACE, "--leader-elect-lease", LEASE, "--leader-elect-namespace", NAMESPACE,
            "--health-port", str(free_port()), "--metrics-port", "0", "--log-level", "warning"]  # fmt: skip
    return OperatorProcess(args, kubeconfig, env={"POD_NAME": identity}, workdir=work / identity).start()


def run_operator_takeover(timeout: float = 60.0) -> OperatorRun:
    with (
        stack(
            real=True, nodes=2, npus_per_node=16, start_seconds=0.2, ready_seconds=0.3, crds=[crd()]
        ) as local,
        tempfile.TemporaryDirectory(prefix="ascend-fleet-operator-ha-") as tmp,
    ):
        kube = local.cluster.kube()
        prepare_namespace(kube, NAMESPACE)
        work = Path(tmp)
        kubeconfig = local.cluster.control_plane.write_kubeconfig(work / "kubeconfig")
        operators = {identity: _operator(kubeconfig, identity, work) for identity in CANDIDATES}
        try:
            holder = wait_for(lambda: _lease(kube).get("holderIdentity"), 60, "a holder of the leader Lease")
            doc = example(NAMESPACE)
            doc["spec"]["rules"] = []  # nothing but reconciling acts
            kube.create(doc)
            wait_for(lambda: _ready(kube), 120, "the fleet reconciled by the elected operator")
            (pod,) = _engine_pods(kube)
            lease = _lease(kube)
            renewed = parse_rfc3339(lease.get("renewTime"))
            assert renewed is not None, "the holder renews its Lease"
            floor = max(LeaseTiming().lease_duration - (time.time() - renewed), 0.0)
            run = OperatorRun(floor, killed=holder)
            began = time.monotonic()
            process = operators[holder.rsplit("_", 1)[0]].process
            assert process is not None, "both operators run"
            process.kill()  # SIGKILL: the Lease stays unreleased
            kube.delete("Pod", NAMESPACE, pod["metadata"]["name"])
            while time.monotonic() - began < timeout and run.acts is None:
                now = time.monotonic() - began
                current = _lease(kube).get("holderIdentity") or ""
                if run.leads is None and current and current != holder:
                    run.leads, run.leader = now, current
                fresh = [p for p in _engine_pods(kube) if p["metadata"]["uid"] != pod["metadata"]["uid"]]
                if run.leads is not None and fresh:
                    run.acts = now
                time.sleep(_POLL_SECONDS)
            return run
        finally:
            for operator in operators.values():
                operator.stop()


def operator_report(run: OperatorRun) -> str:
    x_floor = f"{run.acts / run.floor:.2f}x" if run.acts and run.floor else "-"
    return "\n".join(
        [
            "| operator Lease floor | standby holds the Lease | acts (deleted pod recreated) | x floor |",
            "|---|---|---|---|",
            f"| {run.floor:.1f} s | {seconds(run.leads)} | {seconds(run.acts)} | {x_floor} |",
        ]
    )
