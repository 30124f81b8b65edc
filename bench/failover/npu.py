"""The NPU-health run of ``bench.failover``: an NPU breaks under one of two replicas, and the built-in safety
rule replaces that replica.

One real control plane with three 8-NPU nodes, the node agent playing the Ascend device plugin, and the
operator with its control loop at the given cycle. The inference is the small SGLang example with two 8-NPU
replicas, the default rules and the built-in safety rule ``npu_unhealthy > 0 for 30s -> replace``, and the default
disruption budget (``drainSeconds: 30``). The bench breaks NPU 3 under replica 1 and times, through the API:
the ``replace`` decision in ``status.actions``, the new pod of replica 1 placed (on which node), and replica 1
serving again (its leader Ready). It also keeps the fewest serving replicas seen meanwhile: the other replica
must serve throughout.

The floor is what the policy itself asks for: the rule's window (the fault must last 30 s) and then the drain
(the replica leaves the pool and its requests get ``drainSeconds`` to finish). A control loop that cycles every
``interval`` adds up to one interval before it sees the window full.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.api.policy import Disruption, builtin_safety_rules
from ascend_fleet.api.settings import ControlSettings, OperatorSettings, PrometheusSettings
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.handlers.control import control_loop_hook
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet.kube import Kube, wait_for
from ascend_fleet_dev.real.nodefailure import serving_leaders
from ascend_fleet_dev.stack import stack
from bench.failover import NAME, example, prepare_namespace, seconds

NAMESPACE = "npu-health"
BROKEN_NPU = 3
_POLL_SECONDS = 0.2
# Nothing answers here: the default rules that read Prometheus report it and wait, the NPU rule reads the API.
NO_PROMETHEUS = "http://127.0.0.1:9"


def _replace_rule():
    return next(rule for rule in builtin_safety_rules() if rule.action == "replace")


def policy_floor() -> float:
    """The safety rule's window, then the default drain: no replacement can serve sooner."""
    return float(_replace_rule().for_) + Disruption().drain_seconds


def inference() -> dict:
    """Two 8-NPU replicas of the small SGLang example: one node each, the third node free."""
    doc = example(NAMESPACE)
    doc["spec"].update(
        parallelism={"tensor": 8, "data": 2},
        autoscaling={"minReplicas": 2, "maxReplicas": 2},
    )
    return doc


@dataclass
class NpuRun:
    """Seconds from the NPU fault to each step (None: not seen within the timeout)."""

    interval: float
    floor: float
    npu: str = ""
    node: str = ""
    decided: float | None = None
    placed: float | None = None
    placed_on: str = ""
    restored: float | None = None
    fewest_serving: int = 2

    @property
    def moved(self) -> bool | None:
        """Whether the new pod landed on another node than the broken NPU's (None: not placed)."""
        return self.placed_on != self.node if self.placed_on else None


def _replica_pods(kube: Kube, replica: str) -> list[dict]:
    selector = {names.LABEL_NAME: NAME, names.LABEL_REPLICA: replica}
    return [p for p in kube.list("Pod", NAMESPACE, selector) if not p["metadata"].get("deletionTimestamp")]


def _decided(kube: Kube) -> bool:
    actions = (kube.get(names.KIND, NAMESPACE, NAME).get("status") or {}).get("actions") or []
    return any(a.get("action") == "replace" and a.get("target") == "replica-1" for a in actions)


def _watch(kube: Kube, run: NpuRun, victim: str, began: float, timeout: float) -> None:
    deadline = began + timeout
    while time.monotonic() < deadline and run.restored is None:
        now = time.monotonic() - began
        serving = serving_leaders(kube, NAMESPACE, NAME)
        run.fewest_serving = min(run.fewest_serving, len(serving))
        if run.decided is None and _decided(kube):
            run.decided = now
        fresh = [p for p in _replica_pods(kube, "1") if p["metadata"]["uid"] != victim]
        if run.placed is None and fresh and fresh[0]["spec"].get("nodeName"):
            run.placed, run.placed_on = now, fresh[0]["spec"]["nodeName"]
        if run.placed is not None and any(p["metadata"]["name"] in serving for p in fresh):
            run.restored = now
        time.sleep(_POLL_SECONDS)


def run_npu(interval: float, timeout: float = 240.0) -> NpuRun:
    """One cluster, one inference, one broken NPU, with the control loop cycling every ``interval`` s."""
    settings = OperatorSettings().model_copy(
        update={
            "prometheus": PrometheusSettings(url=NO_PROMETHEUS),
            "control": ControlSettings(interval=interval, step=interval),
        }
    )
    run = NpuRun(interval, policy_floor())
    with stack(
        real=True, nodes=3, npus_per_node=8, start_seconds=0.2, ready_seconds=0.3, crds=[crd()]
    ) as local:
        kube = local.cluster.kube()
        prepare_namespace(kube, NAMESPACE)
        operator_kube = local.cluster.kube()
        context = OperatorContext(settings, operator_kube)
        context.extra_startup.append(control_loop_hook(ControlLoop(settings, operator_kube)))
        with OperatorThread(context, RunOptions()):
            kube.create(inference())
            wait_for(lambda: len(serving_leaders(kube, NAMESPACE, NAME)) == 2, 120, "2 serving replicas")
            (victim,) = _replica_pods(kube, "1")
            run.node = victim["spec"]["nodeName"]
            began = time.monotonic()
            run.npu = local.cluster.kubelet.mark_npu_unhealthy(run.node, BROKEN_NPU)
            _watch(kube, run, victim["metadata"]["uid"], began, timeout)
    return run


def npu_report(runs: list[NpuRun]) -> str:
    lines = [
        "| control interval | floor (for + drain) | replace decided | new pod placed | serving again "
        "| x floor | new node | serving replicas left |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        x_floor = f"{run.restored / run.floor:.2f}x" if run.restored else "-"
        moved = {True: "another", False: "the same", None: "-"}[run.moved]
        lines.append(
            f"| {run.interval:g} s | {run.floor:.0f} s | {seconds(run.decided)} | {seconds(run.placed)} "
            f"| {seconds(run.restored)} | {x_floor} | {moved} | {run.fewest_serving} |"
        )
    return "\n".join(lines)
