"""Pure presentation of the demo: the live table, decision lines, rule progress and the summary."""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_fleet.api.units import format_duration


@dataclass
class ReplicaRow:
    replica: int
    pods: int
    ready: int
    utilization: float | None
    fragmentation: float | None
    queue: float | None
    draining: bool = False


@dataclass
class RuleProgress:
    """How long a rule's condition has held so far, against its window."""

    rule: str
    held: float
    window: float
    value: float | None


@dataclass(frozen=True)
class ClassFigures:
    """One priority class over the last seconds: requests per second finished, share with a first token over
    1 s, shed and failed requests (``ascend-fleet dev --routing``)."""

    name: str
    priority: int
    per_second: float
    slow_share: float | None  # None: no answered request in the window
    shed: int
    failed: int
    failures: str = ""  # what the failed requests got, e.g. "502 x2, ServerDisconnectedError after 200"


@dataclass
class Frame:
    """Everything one frame of the live view shows."""

    elapsed: float
    name: str
    desired: int
    ready: int
    conditions: dict[str, str]  # type -> "True (Reason)"
    rows: list[ReplicaRow] = field(default_factory=list)
    rules: list[RuleProgress] = field(default_factory=list)
    npu_minutes: float = 0.0
    traffic: list[ClassFigures] | None = None  # routed requests per class, when the demo sends them
    gateway: str = ""
    split: dict[str, int] = field(default_factory=dict)  # status.traffic: percent per variant (none without)


@dataclass
class Decision:
    """One status.actions entry as the demo reports it."""

    elapsed: float
    action: str
    rule: str
    target: str
    value: float | None
    result: str
    dry_run: bool = False


def clock(seconds: float) -> str:
    minutes, rest = divmod(int(max(seconds, 0)), 60)
    return f"{minutes}:{rest:02d}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:5.1f}%"


def _bar(fraction: float, width: int = 12) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def frame(snapshot: Frame) -> list[str]:
    """The live view, as lines (the caller redraws them in place on a terminal)."""
    lines = [
        f"ascend-fleet dev  {clock(snapshot.elapsed)}   {snapshot.name}: {snapshot.ready}/{snapshot.desired} "
        f"replicas ready   NPU-minutes {snapshot.npu_minutes:.1f}",
        "conditions: " + ", ".join(f"{k}={v}" for k, v in snapshot.conditions.items()),
        "",
        f"{'REPLICA':<8}{'PODS':<6}{'READY':<7}{'NPU UTIL':>9}{'FRAG':>9}{'QUEUE':>7}  STATE",
    ]
    for row in snapshot.rows:
        queue = "-" if row.queue is None else f"{row.queue:.0f}"
        state = (
            "draining" if row.draining else ("serving" if row.ready == row.pods and row.pods else "starting")
        )
        lines.append(
            f"{row.replica:<8}{row.pods:<6}{row.ready:<7}{_percent(row.utilization):>9}"
            f"{_percent(row.fragmentation):>9}{queue:>7}  {state}"
        )
    if snapshot.rules:
        lines += ["", "rule windows:"]
        for progress in snapshot.rules:
            shown = "" if progress.value is None else f" (now {_percent(progress.value).strip()})"
            lines.append(
                f"  {_bar(progress.held / progress.window if progress.window else 0)} "
                f"{min(progress.held, progress.window):4.0f}/{progress.window:.0f}s  "
                f"{progress.rule}{shown}"
            )
    if snapshot.traffic is not None:
        lines += ["", f"routed traffic, last 10 s (Envoy + endpoint picker at {snapshot.gateway or '-'}):"]
        lines.append(
            f"  {'CLASS':<10}{'PRIORITY':>9}{'REQ/S':>8}{'FIRST TOKEN > 1 S':>19}{'SHED':>6}{'FAILED':>8}"
        )
        for figures in snapshot.traffic:
            lines.append(
                f"  {figures.name:<10}{figures.priority:>9}{figures.per_second:>8.1f}"
                f"{_percent(figures.slow_share):>19}{figures.shed:>6}{figures.failed:>8}"
            )
    return lines


def status_line(snapshot: Frame) -> str:
    """One line for a log (stdout that is not a terminal)."""
    cells = " ".join(
        f"r{row.replica}={_percent(row.utilization).strip()}/{_percent(row.fragmentation).strip()}"
        + ("(drain)" if row.draining else "")
        for row in snapshot.rows
    )
    traffic = ""
    if snapshot.traffic is not None:
        traffic = "; routed " + ", ".join(
            f"{f.name} {f.per_second:.1f}/s {_percent(f.slow_share).strip()} >1s"
            + (f" {f.shed} shed" if f.shed else "")
            + (f" {f.failed} failed ({f.failures})" if f.failed else "")
            for f in snapshot.traffic
        )
    split = f"; split {describe_split(snapshot.split)}" if snapshot.split else ""
    return (
        f"[{clock(snapshot.elapsed)}] {snapshot.ready}/{snapshot.desired} ready; util/frag {cells}; "
        f"NPU-min {snapshot.npu_minutes:.1f}{split}{traffic}"
    )


def describe_split(split: dict[str, int]) -> str:
    """``fp16 25% int8 75%``: status.traffic as the status line shows it."""
    return " ".join(f"{variant} {weight}%" for variant, weight in split.items())


def _value(value: float) -> str:
    return f"{value * 100:.1f}%" if 0.0 <= value <= 1.0 else f"{value:g}"


def decision_line(decision: Decision) -> str:
    value = "" if decision.value is None else f" at {_value(decision.value)}"
    dry = " (dry run)" if decision.dry_run else ""
    return (
        f"[{clock(decision.elapsed)}] {decision.action} on {decision.target}{dry}: "
        f"{decision.rule}{value} -> {decision.result}"
    )


REQUIRED = ("scale_up", "restart_service", "scale_down")
SHIFT = "shift_traffic"


def story_complete(decisions: list[Decision], shift_rules: tuple[str, ...] = ()) -> bool:
    """The demo's story is told once each of scale_up, restart_service and scale_down happened, and, in a
    fleet with precision variants, each of its shift_traffic rules (``shift_rules``, by display name) acted:
    traffic moved under the peak and back after it."""
    seen = {d.action for d in decisions if not d.dry_run}
    shifted = {d.rule for d in decisions if d.action == SHIFT and not d.dry_run}
    return all(action in seen for action in REQUIRED) and all(rule in shifted for rule in shift_rules)


def _first_lines(decisions: list[Decision], shift_rules: tuple[str, ...]) -> list[str]:
    """One line per required action and per shift rule: when it first acted, or never."""
    lines = []
    for action in REQUIRED:
        first = next((d for d in decisions if d.action == action and not d.dry_run), None)
        shown = clock(first.elapsed) if first else "never"
        rule = f"  ({first.rule})" if first else ""
        lines.append(f"    {action:<16}{shown}{rule}")
    for name in shift_rules:
        moved = next((d for d in decisions if d.action == SHIFT and d.rule == name and not d.dry_run), None)
        lines.append(f"    {SHIFT:<16}{clock(moved.elapsed) if moved else 'never'}  ({name})")
    return lines


def summary(
    decisions: list[Decision],
    elapsed: float,
    npu_minutes: float,
    final: Frame | None,
    shift_rules: tuple[str, ...] = (),
) -> list[str]:
    """The closing report: every decision with its rule, time to each kind of action, NPU-minutes."""
    lines = ["", f"Summary after {format_duration(round(elapsed))}:", "  decisions:"]
    lines += [f"    {decision_line(d)}" for d in decisions] or ["    none"]
    lines.append("  time to first:")
    lines += _first_lines(decisions, shift_rules)
    lines.append(f"  NPU-minutes used: {npu_minutes:.1f}")
    if final is not None:
        lines.append(f"  final: {final.ready}/{final.desired} replicas ready")
    lines.append(
        "  story: "
        + (
            (
                "complete (scale_up, restart_service and scale_down all happened"
                + (", and traffic shifted by each shift_traffic rule)" if shift_rules else ")")
            )
            if story_complete(decisions, shift_rules)
            else "INCOMPLETE: see which action never came"
        )
    )
    return lines
