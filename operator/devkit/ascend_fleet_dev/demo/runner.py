"""Run the whole system on one machine and tell the demo's story live.

Every part is real except the hardware: a local Kubernetes API with a kubelet simulator, simulated
engines serving the same metrics a real engine + exporter would, a real Prometheus scraping them,
and the operator with its control loop, talking to the API over HTTP like in a cluster.

With ``engines="vllm"`` (on the real control plane) each replica's leader is a real ``vllm serve`` of the
tiny model instead: its API, scheduler and ``vllm:`` series are vLLM's, while the NPU series the rules read
still come from the scenario (the simulated engines serve them as a second scrape target of the pod, from
the moment vLLM is healthy), and the scenario's clock starts when the first engine serves.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from ascend_fleet.api import names
from ascend_fleet.api.catalog import Catalog
from ascend_fleet.api.crd import crd
from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.api.times import parse_rfc3339
from ascend_fleet.control.loop import ControlLoop
from ascend_fleet.handlers.control import control_loop_hook
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread
from ascend_fleet.kube import Kube, KubeError
from ascend_fleet.observed import pod_ready
from ascend_fleet.render import InvalidSpec, validate
from ascend_fleet.status import fleet_serving
from ascend_fleet_dev.demo import view
from ascend_fleet_dev.demo.realengines import TooFewEngines, fit_story
from ascend_fleet_dev.demo.traffic import Traffic
from ascend_fleet_dev.fleet.prometheus import (
    PrometheusError,
    PrometheusNotFound,
    PrometheusServer,
    find_prometheus_binary,
)
from ascend_fleet_dev.fleet.scenario import Scenario, ScenarioError
from ascend_fleet_dev.local.signals import stop_on_signals
from ascend_fleet_dev.real.controlplane import ControlPlaneUnavailable, ensure_binary
from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable
from ascend_fleet_dev.real.localpods import LocalPods, install_inference_extension
from ascend_fleet_dev.real.realcluster import RealCluster, provide_model_claim
from ascend_fleet_dev.real.realengines import RealEnginesUnavailable
from ascend_fleet_dev.stack import Stack, stack

HERE = Path(__file__).resolve().parent
DEMO_FILE = HERE / "demo.yaml"  # the same document as examples/demo.yaml (a test keeps them equal)
EXIT_OK, EXIT_INCOMPLETE, EXIT_SETUP = 0, 1, 2
TIMEOUTS = {"simulated": 300.0, "vllm": 900.0}  # a real engine starts in 1 to 4 minutes on 2 cores
ROW_METRICS = {"utilization": "npu_utilization", "fragmentation": "mem_fragmentation", "queue": "queue_depth"}


@dataclass
class DemoOptions:
    file: Path = DEMO_FILE
    scenario: Path | None = None
    timeout: float | None = None  # default: TIMEOUTS by engine kind
    keep: bool = False
    kubeconfig: Path = Path("~/.kube/ascend-fleet-dev.yaml")
    real: bool = False  # the real control plane instead of the local emulator
    routing: bool = False  # an InferencePool + endpoint picker in front, with requests per class (needs real)
    rate: float = 4.0  # requests per second sent through the gateway with ``routing``
    engines: str = "simulated"  # or "vllm": real vLLM engines (needs real)
    max_real_engines: int = 2
    tick: float = 1.0
    linger: float = 5.0  # seconds shown after the story completes
    out: TextIO = field(default_factory=lambda: sys.stdout)


def demo_settings(prometheus_url: str) -> OperatorSettings:
    """The operator's configuration for the demo: the same code, with timers in seconds."""
    return OperatorSettings.model_validate(
        {
            "prometheus": {"url": prometheus_url, "timeout": "5s"},
            "control": {"interval": "2s", "step": "1s"},
            "reconcile": {"backoffInitial": "5s", "backoffMax": "30s", "resyncInterval": "5s"},
        }
    )


class Setup(Exception):
    """Something the demo needs is missing; the message says how to get it."""


def run_demo(options: DemoOptions) -> int:
    """Run the demo to the end of its story (or the timeout); the exit code says whether it completed."""
    out = options.out
    try:
        doc, scenario = _load(options)
        doc, note = _fit_engines(options, doc)
        find_prometheus_binary()
    except (PrometheusNotFound, Setup) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_SETUP
    if options.routing and not options.real:
        print(
            "error: --routing needs --real: the endpoint picker is a Deployment, and only the real "
            "control plane's controllers turn it into a pod",
            file=sys.stderr,
        )
        return EXIT_SETUP
    if options.routing:
        doc["spec"].setdefault("routing", {})["mode"] = "inferencePool"
    name = doc["metadata"]["name"]
    api = "the real Kubernetes control plane" if options.real else "a local Kubernetes API"
    engines = "real vLLM engines" if options.engines == "vllm" else "simulated engines"
    print(
        f"Starting {api}, a real Prometheus, {engines} and the operator for {name} ...", file=out, flush=True
    )
    if note:
        print(note, file=out, flush=True)
    with contextlib.ExitStack() as running:
        stop = running.enter_context(stop_on_signals())
        try:
            local = running.enter_context(_stack(options, scenario))
        except (ControlPlaneUnavailable, RealEnginesUnavailable, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_SETUP
        cluster, kube, prometheus = local.cluster, local.kube, local.prometheus
        assert prometheus is not None  # asked for
        if options.real:
            provide_model_claim(kube, doc["metadata"].get("namespace", "default"))
        routed = None
        if options.routing:
            assert isinstance(cluster, RealCluster)  # --routing without --real was refused above
            try:
                install_inference_extension(kube)
                pickers = running.enter_context(LocalPods(kube, cluster.control_plane))
            except DataPlaneUnavailable as error:
                print(f"error: {error}", file=sys.stderr)
                return EXIT_SETUP
            cluster.kubelet.add_listener(pickers)
            routed = running.enter_context(Routed(pickers, doc, options.rate))
        settings = demo_settings(prometheus.url)
        context = OperatorContext(settings, kube)
        context.extra_startup.append(control_loop_hook(ControlLoop(settings, kube)))
        running.enter_context(OperatorThread(context))
        print(f"Applying {options.file} (rules: {'; '.join(_rules(doc))})", file=out, flush=True)
        scenario.start(time.time())
        kube.create(doc)
        story = Story(kube, prometheus, doc, Catalog.build(), out, routed)
        story.clock_on_ready = scenario if options.engines == "vllm" else None
        completed = story.run(options, stop)
        summary = view.summary(
            story.decisions, story.elapsed(), story.npu_minutes, story.last, story.shift_rules
        )
        for line in summary:
            print(line, file=out)
        if options.keep and not stop.is_set():
            print(
                f"\nStill running. In another shell:\n  export KUBECONFIG={cluster.kubeconfig_path}\n"
                f"  kubectl get ainf,pods\nPress Ctrl+C to stop.",
                file=out,
                flush=True,
            )
            stop.wait()
        print(
            f"Stopping the operator, Prometheus, {engines} and the Kubernetes API ...", file=out, flush=True
        )
    return EXIT_OK if completed else EXIT_INCOMPLETE


def _stack(options: DemoOptions, scenario: Scenario) -> contextlib.AbstractContextManager[Stack]:
    """The demo's cluster with the CRD, a real Prometheus and simulated engines that wait for the story."""
    if options.real:
        ensure_binary(progress=lambda line: print(line, file=options.out, flush=True))
    # With routed requests the story still runs on the scenario's NPU utilization (docs/routing.md).
    return stack(
        real=options.real,
        start_seconds=0.5,
        ready_seconds=1.0,
        kubeconfig=options.kubeconfig.expanduser(),
        crds=[crd()],
        prometheus=True,
        scenario=scenario,
        engine_options={
            "start_scenario": False,
            "traffic_utilization": not options.routing,
            "npu_for_real": True,
        },
        engines=options.engines,
        real_engine_limit=options.max_real_engines,
    )


def _fit_engines(options: DemoOptions, doc: dict) -> tuple[dict, str | None]:
    """The fleet as the engines allow (real ones: at most ``max_real_engines`` replicas), and what changed."""
    if options.engines == "simulated":
        return doc, None
    if not options.real:
        raise Setup("--engines vllm runs on the real control plane only (add --real)")
    try:
        return fit_story(doc, options.max_real_engines)
    except TooFewEngines as error:
        raise Setup(str(error)) from None


def _load(options: DemoOptions) -> tuple[dict, Scenario]:
    try:
        doc = yaml.safe_load(Path(options.file).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise Setup(f"cannot read {options.file}: {error}") from None
    doc.setdefault("metadata", {}).setdefault("namespace", "default")
    try:
        validate(doc)
    except InvalidSpec as error:
        raise Setup(f"{options.file} is not a valid AscendInference: {'; '.join(error.problems)}") from None
    try:
        real_engines = options.engines == "vllm"
        scenario = Scenario.from_file(options.scenario) if options.scenario else Scenario.demo(real_engines)
    except ScenarioError as error:
        raise Setup(str(error)) from None
    return doc, scenario


def _rules(doc: dict) -> list[str]:
    return [rule.describe() for rule in validate(doc).obj.spec.rules_in_force()]


class Routed:
    """The demo's requests: sent through the pool's gateway once its picker pod runs, stopped on exit."""

    def __init__(self, pickers: LocalPods, doc: dict, rate: float) -> None:
        self.pickers, self.obj, self.rate = pickers, validate(doc).obj, rate
        self.name, self.namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
        self.traffic: Traffic | None = None
        self.gateway = ""

    def follow(self, serving: bool) -> None:
        """Start the requests once the fleet serves (``serving``: Ready, every replica ready) and the pool's
        picker pod runs and its gateway answers. Before every replica is ready a request can be drawn for a
        variant none of whose pods serves yet, and the picker refuses it: the demo's client waits as a user
        waits for ``kubectl wait --for=condition=Ready``."""
        if self.traffic is not None or not serving:
            return
        route = self.pickers.route(self.namespace, self.name)
        if route is None:
            return
        self.gateway = route.url
        self.traffic = Traffic(
            route.url, self.name, self.obj.spec.model.name, self.obj.spec.routing, rate=self.rate
        ).start()

    def figures(self) -> list[view.ClassFigures]:
        """Per request class, what the last window showed (nothing before the requests start)."""
        return [] if self.traffic is None else self.traffic.figures()

    def __enter__(self) -> Routed:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.traffic is not None:
            self.traffic.stop()


class Story:
    """Watches the fleet through the API and Prometheus, as a user would, and reports it."""

    def __init__(
        self,
        kube: Kube,
        prometheus: PrometheusServer,
        doc: dict,
        catalog: Catalog,
        out: TextIO,
        routed: Routed | None = None,
    ):
        self.kube, self.prometheus, self.catalog, self.out = kube, prometheus, catalog, out
        self.routed = routed
        self.name, self.namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
        self.started = time.time()
        self.decisions: list[view.Decision] = []
        self.npu_minutes = 0.0
        self.last: view.Frame | None = None
        self._held: dict[str, float] = {}
        self._seen_actions: set[tuple[str, str, str]] = set()
        self._last_tick = time.monotonic()
        self._tty = out.isatty()
        self._last_line = 0.0
        # Real engines: the scenario's clock starts when the first replica serves (its NPU series appear then).
        self.clock_on_ready: Scenario | None = None
        # In a fleet with precision variants the story also needs each shift rule to act (there and back).
        self.shift_rules = tuple(
            rule.display_name()
            for rule in validate(doc).obj.spec.rules_in_force()
            if rule.action == view.SHIFT
        )

    def elapsed(self) -> float:
        return time.time() - self.started

    def run(self, options: DemoOptions, stop: threading.Event) -> bool:
        complete_at: float | None = None
        timeout = options.timeout if options.timeout is not None else TIMEOUTS[options.engines]
        while not stop.is_set() and self.elapsed() < timeout:
            self.tick()
            if complete_at is None and view.story_complete(self.decisions, self.shift_rules):
                complete_at = time.monotonic()
            if complete_at is not None and time.monotonic() - complete_at >= options.linger:
                return True
            stop.wait(options.tick)
        return view.story_complete(self.decisions, self.shift_rules)

    def tick(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        try:
            obj = self.kube.get(names.KIND, self.namespace, self.name)
            pods = self.kube.list("Pod", self.namespace, {names.LABEL_NAME: self.name})
        except KubeError as error:
            print(f"[{view.clock(self.elapsed())}] API error: {error}", file=self.out, flush=True)
            return
        self.npu_minutes += _running_npus(pods) * dt / 60.0
        values = self._metrics()
        snapshot = self._snapshot(obj, pods, values, dt)
        self.last = snapshot
        if self.routed is not None:
            self.routed.follow(serving=fleet_serving(obj))
        if self.clock_on_ready is not None and snapshot.ready >= 1:
            self.clock_on_ready.start(time.time())
            self.clock_on_ready = None
            print(f"[{view.clock(self.elapsed())}] a real vLLM engine serves: the scenario starts now",
                  file=self.out, flush=True)  # fmt: skip
        new = self._new_decisions(obj)
        self._show(snapshot, new)

    def _metrics(self) -> dict[str, dict[int, float]]:
        """Per-replica values of the row metrics, from Prometheus (what the control loop sees)."""
        values: dict[str, dict[int, float]] = {}
        for key, metric in ROW_METRICS.items():
            expression = self.catalog.expression(metric)
            values[key] = {}
            try:
                series = self.prometheus.query(expression) if expression else []
            except PrometheusError:
                continue
            for item in series:
                labels = item.get("metric", {})
                if labels.get("namespace") == self.namespace and labels.get("inference") == self.name:
                    with contextlib.suppress(KeyError, ValueError):
                        values[key][int(labels["replica"])] = float(item["value"][1])
        return values

    def _snapshot(self, obj: dict, pods: list[dict], values: dict, dt: float) -> view.Frame:
        spec, status = obj.get("spec", {}), obj.get("status", {})
        rows: dict[int, view.ReplicaRow] = {}
        for pod in pods:
            labels = pod["metadata"].get("labels", {})
            if names.LABEL_REPLICA not in labels:  # the endpoint picker's pod, not an engine's
                continue
            replica = int(labels[names.LABEL_REPLICA])
            row = rows.setdefault(
                replica,
                view.ReplicaRow(
                    replica,
                    0,
                    0,
                    values["utilization"].get(replica),
                    values["fragmentation"].get(replica),
                    values["queue"].get(replica),
                ),
            )
            row.pods += 1
            row.ready += pod_ready(pod)
            row.draining |= labels.get(names.LABEL_SERVING) == "false"
        conditions = {c["type"]: f"{c['status']}({c['reason']})" for c in status.get("conditions", [])}
        return view.Frame(
            elapsed=self.elapsed(),
            name=self.name,
            desired=spec.get("parallelism", {}).get("data", 0),
            ready=status.get("readyReplicas", 0),
            conditions=conditions,
            rows=[rows[k] for k in sorted(rows)],
            rules=self._progress(obj, values, dt),
            npu_minutes=self.npu_minutes,
            traffic=None if self.routed is None else self.routed.figures(),
            gateway="" if self.routed is None else self.routed.gateway,
            split={t["variant"]: t["weight"] for t in status.get("traffic") or []},
        )

    def _progress(self, obj: dict, values: dict, dt: float) -> list[view.RuleProgress]:
        try:
            rules = validate(obj).obj.spec.rules_in_force()
        except InvalidSpec:
            return []
        progress = []
        for rule in rules:
            key = next((k for k, m in ROW_METRICS.items() if m == rule.metric), None)
            per_replica = list(values.get(key, {}).values()) if key else []
            value = None
            if per_replica:
                if rule.scope == "replica":
                    value = max(per_replica) if rule.comparison in (">", ">=") else min(per_replica)
                else:
                    value = sum(per_replica) / len(per_replica)
            holds = value is not None and _compare(value, rule.comparison, rule.threshold)
            label = rule.display_name()
            self._held[label] = self._held.get(label, 0.0) + dt if holds else 0.0
            progress.append(view.RuleProgress(label, self._held[label], float(rule.for_), value))
        return progress

    def _new_decisions(self, obj: dict) -> list[view.Decision]:
        new = []
        for action in reversed(obj.get("status", {}).get("actions", [])):
            key = (action.get("time", ""), action.get("action", ""), action.get("target", ""))
            if key in self._seen_actions:
                continue
            self._seen_actions.add(key)
            at = parse_rfc3339(action.get("time")) or time.time()
            decision = view.Decision(
                at - self.started,
                action.get("action", "?"),
                action.get("rule", "?"),
                action.get("target", "?"),
                action.get("value"),
                action.get("result", ""),
                bool(action.get("dryRun")),
            )
            self.decisions.append(decision)
            new.append(decision)
        return new

    def _show(self, snapshot: view.Frame, new: list[view.Decision]) -> None:
        if self._tty:
            recent = [view.decision_line(d) for d in self.decisions[-6:]]
            lines = view.frame(snapshot) + ["", "decisions:"] + (recent or ["  (none yet)"])
            self.out.write("\x1b[H\x1b[2J" + "\n".join(lines) + "\n")
            self.out.flush()
            return
        for decision in new:
            print(view.decision_line(decision), file=self.out, flush=True)
        if time.monotonic() - self._last_line >= 5.0:
            print(view.status_line(snapshot), file=self.out, flush=True)
            self._last_line = time.monotonic()


def _compare(value: float, comparison: str, threshold: float) -> bool:
    return {
        ">": value > threshold,
        ">=": value >= threshold,
        "<": value < threshold,
        "<=": value <= threshold,
    }[comparison]


def _running_npus(pods: list[dict]) -> int:
    """NPUs held by running pods (what a cluster would bill)."""
    total = 0
    for pod in pods:
        if pod.get("status", {}).get("phase") != "Running":
            continue
        for container in pod["spec"].get("containers", []):
            for resource, amount in container.get("resources", {}).get("limits", {}).items():
                if resource.startswith("huawei.com/"):
                    total += int(amount)
    return total
