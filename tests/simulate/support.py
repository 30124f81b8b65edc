"""Small traces and scripted policies for simulator tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_fleet.simulate.model import FleetView, TickDecision
from ascend_fleet.simulate.traces import Trace

REFERENCE_PROMPT = 512


def periodic(
    rate: float, duration: float, output: int, prompt: int = REFERENCE_PROMPT, start: float = 0.0
) -> Trace:
    """Requests every 1/rate seconds from ``start``, all alike: a fixed load with no randomness."""
    count = int((duration - start) * rate)
    arrivals = [start + i / rate for i in range(count)]
    return Trace("periodic", duration, arrivals, [prompt] * count, [output] * count)


def burst(count: int, output: int, duration: float, prompt: int = REFERENCE_PROMPT) -> Trace:
    """``count`` identical requests, all at t = 0."""
    return Trace("burst", duration, [0.0] * count, [prompt] * count, [output] * count)


@dataclass
class Script:
    """Sets the replica count from given times on (``{time: replicas}``); never restarts anything."""

    steps: dict[float, int]
    interval: float = 1.0
    name: str = "script"
    seen: list[FleetView] = field(default_factory=list)

    def decide(self, view: FleetView) -> TickDecision:
        self.seen.append(view)
        due = [n for t, n in sorted(self.steps.items()) if view.now >= t]
        return TickDecision(replicas=due[-1] if due else None)
