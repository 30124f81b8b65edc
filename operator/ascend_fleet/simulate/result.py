"""What one simulated run produced: per-request latencies, the replicas' lives and the fleet's timeline."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from .traces import HOUR
from .variants import SimVariant


@dataclass(frozen=True)
class TimelinePoint:
    """The fleet at one scrape, for plots."""

    time: float
    desired: int
    replicas: int
    serving: int
    utilization: float
    fragmentation: float


@dataclass(frozen=True)
class ReplicaLife:
    """One replica object from creation to deletion (None while it still exists at the end)."""

    index: int
    created: float
    ready_at: float | None
    deleted: float | None
    end: str


@dataclass
class Result:
    """Everything a run produced; ``report`` turns it into numbers."""

    policy: str
    trace: str
    duration: float
    npus_per_replica: int
    arrivals: array
    output_tokens: list[int]
    first_token: array
    """Seconds from arrival to first token per request; NaN for a failed request."""
    end_to_end: array
    """Seconds from arrival to last token per request; NaN for a failed request."""
    served_by: array
    """Replica index that admitted each request; -1 if none did."""
    failures: dict[str, int]
    scale_ups: int = 0
    scale_downs: int = 0
    rule_restarts: int = 0
    oom_crashes: int = 0
    npu_seconds: float = 0.0
    timeline: list[TimelinePoint] = field(default_factory=list)
    lives: list[ReplicaLife] = field(default_factory=list)
    variants: tuple[SimVariant, ...] = ()
    """The fleet's precision variants: replica i ran variant i mod their number."""

    @property
    def npu_hours(self) -> float:
        return self.npu_seconds / HOUR
