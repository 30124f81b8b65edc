"""Synthetic load for the simulated engines of the local dev cluster.

A scenario gives every inference (``namespace/name``) a *demand* curve in replica-equivalents of
work over time. Everything a simulated engine exports follows from it and from the pod itself:

- utilization of each ready replica = clamp(demand / ready replicas, 0, 1), plus small seeded noise;
- requests waiting in the queue grow with the demand that exceeds the ready replicas;
- KV-cache and HBM usage follow utilization, and so do the per-core-type readings and HBM bandwidth, which
  the profile's ``chip`` may not report at all (:mod:`~ascend_fleet_dev.fleet.chips`);
- memory fragmentation grows with the pod's age, so a recreated pod starts near zero again.

Tests and the dev UI can pin values with :meth:`Scenario.set`. Apart from reading a YAML file in
:meth:`Scenario.from_file`, nothing here does I/O or reads a clock: callers pass ``now``.

Scenario file schema (durations are seconds or strings such as ``30s``, ``2m``, ``1h``, ``5min``)::

    seed: 7            # noise seed (default 0)
    noise: 0.02        # utilization noise amplitude, 0..1 (default 0.02)
    inferences:        # key: "namespace/name", "name" (any namespace) or "*" (any inference)
      "*":
        demand:        # a number, a list of [time, value] points, or start + phases
          start: 1.0
          phases:
            - {hold: 10s}               # keep the current value
            - {to: 3.0, over: 30s}      # move linearly to a value (over: 0 is a step)
          repeat: false                 # loop the curve after its last point
        fragmentation:                  # per pod, a function of the pod's age
          start: 0.01                   # a new pod's fragmentation
          per_minute: 0.005             # growth per minute of pod age
          max: 0.6
          replicas:                     # overrides per replica index, any subset of the fields above
            1: {per_minute: 0.25}
        max_running_requests: 32        # requests a fully busy replica runs
        hbm_total_gib: 64               # per device
        hbm_static_fraction: 0.60       # HBM held at idle (weights + KV pool)
        hbm_dynamic_fraction: 0.25      # extra HBM at full utilization
        chip: ascend910b                # ascend910a | ascend910b | ascend910_93: which readings npu-smi prints

An inference that matches no key is idle (demand 0).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ascend_fleet.api.checks import DEFAULT_CHIP
from ascend_fleet.api.units import parse_duration
from ascend_fleet_dev.fleet.chips import CHIPS, CoreReadings, core_readings

GIB = 1024**3
WILDCARD = "*"

# Slack counts reserved-but-unallocated memory; an idle replica keeps a little of its pool cached.
_IDLE_SLACK = 0.10
# A busy replica fills most of its KV pool; an idle one still holds the prefix cache's few blocks.
_KV_IDLE = 0.05
_KV_SPAN = 0.90


class ScenarioError(ValueError):
    """A scenario file or mapping does not follow the schema; the message says where and why."""


@dataclass(frozen=True)
class EngineSample:
    """What one simulated engine pod exports at one instant (per device where it applies)."""

    utilization: float
    fragmentation: float
    slack: float
    hbm_used_bytes: int
    hbm_total_bytes: int
    reserved_bytes: int
    allocated_bytes: int
    requests_running: int
    requests_waiting: int
    kv_cache_usage: float
    alloc_retries: int
    # AI Cube/Vector/CPU utilization and HBM bandwidth saturation; a field the chip does not report is None.
    cores: CoreReadings = CoreReadings()
    chip: str = DEFAULT_CHIP


@dataclass(frozen=True)
class Curve:
    """A piecewise-linear function of scenario time, constant before the first and after the last point."""

    points: tuple[tuple[float, float], ...]
    repeat: bool = False

    def at(self, t: float) -> float:
        """Value at scenario time ``t`` (seconds)."""
        points = self.points
        end = points[-1][0]
        if self.repeat and end > 0:
            t = t % end
        if t <= points[0][0]:
            return points[0][1]
        for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
            if t <= t1:
                return v1 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        return points[-1][1]


@dataclass(frozen=True)
class FragmentationModel:
    """Fragmentation of one pod as a function of its age: a capped linear ramp."""

    start: float = 0.01
    per_minute: float = 0.005
    max: float = 0.6

    def at(self, age: float) -> float:
        """Fragmentation ratio of a pod that has run for ``age`` seconds."""
        return min(self.max, self.start + self.per_minute * max(0.0, age) / 60.0)


@dataclass(frozen=True)
class Profile:
    """The synthetic load and engine shape for one inference (or a wildcard of them)."""

    demand: Curve = field(default_factory=lambda: Curve(((0.0, 0.0),)))
    fragmentation: FragmentationModel = field(default_factory=FragmentationModel)
    replica_fragmentation: Mapping[int, FragmentationModel] = field(default_factory=dict)
    max_running_requests: int = 32
    hbm_total_bytes: int = 64 * GIB
    hbm_static_fraction: float = 0.60
    hbm_dynamic_fraction: float = 0.25
    chip: str = DEFAULT_CHIP

    def fragmentation_for(self, replica: int) -> FragmentationModel:
        """The fragmentation model of one replica (its override, or the inference's)."""
        return self.replica_fragmentation.get(replica, self.fragmentation)


@dataclass(frozen=True)
class Override:
    """Values pinned by a test or an operator of the demo; ``None`` fields follow the model."""

    utilization: float | None = None
    fragmentation: float | None = None
    queue: int | None = None

    def merged_over(self, base: Override) -> Override:
        """This override's fields, falling back to ``base`` where this one has none."""
        return Override(
            utilization=_first_set(self.utilization, base.utilization),
            fragmentation=_first_set(self.fragmentation, base.fragmentation),
            queue=_first_set(self.queue, base.queue),
        )


_NO_OVERRIDE = Override()
# Override key: (namespace, inference, replica) with replica None meaning every replica.
OverrideKey = tuple[str, str, int | None]


class Scenario:
    """Synthetic load for every simulated inference, sampled as a pure function of time and pod."""

    def __init__(
        self,
        profiles: Mapping[str, Profile] | None = None,
        *,
        seed: int = 0,
        noise: float = 0.02,
        origin: float = 0.0,
    ) -> None:
        self.profiles: dict[str, Profile] = dict(profiles or {})
        self.seed = seed
        self.noise = noise
        self.origin = origin
        self._overrides: dict[OverrideKey, Override] = {}
        self._lock = threading.Lock()

    # Construction -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "scenario") -> Scenario:
        """Build a scenario from its parsed YAML form; raise :class:`ScenarioError` naming ``source``."""
        try:
            return cls(**_parse_scenario(data))
        except ScenarioError as err:
            raise ScenarioError(f"{source}: {err}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Scenario:
        """Load a scenario YAML file (schema in this module's docstring)."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise ScenarioError(f"{path}: cannot read the scenario file: {err.strerror}") from None
        except yaml.YAMLError as err:
            raise ScenarioError(f"{path}: not valid YAML: {err}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def demo(cls, real_engines: bool = False) -> Scenario:
        """The packaged demo: a peak (scale-up), a leaking replica (restart), then a lull (scale-down); with
        ``real_engines`` its timeline stretched around real engines' start times."""
        name = "demo-real-engines.yaml" if real_engines else "demo.yaml"
        text = resources.files(__package__).joinpath("scenarios", name).read_text(encoding="utf-8")
        return cls.from_dict(yaml.safe_load(text), source=f"scenarios/{name}")

    @classmethod
    def constant(cls, demand: float, *, noise: float = 0.0, **profile: Any) -> Scenario:
        """Every inference under the same constant demand; ``profile`` sets other :class:`Profile` fields."""
        return cls({WILDCARD: Profile(demand=Curve(((0.0, float(demand)),)), **profile)}, noise=noise)

    def start(self, now: float) -> None:
        """Make ``now`` scenario time zero (the simulated engines do this when they start)."""
        self.origin = now

    # Sampling -----------------------------------------------------------------------------

    def profile_for(self, namespace: str, inference: str) -> Profile:
        """The profile for an inference: exact ``namespace/name``, then ``name``, then ``*``, else idle."""
        for key in (f"{namespace}/{inference}", inference, WILDCARD):
            if key in self.profiles:
                return self.profiles[key]
        return Profile()

    def demand(self, now: float, namespace: str, inference: str) -> float:
        """Work wanted from an inference at ``now``, in replica-equivalents."""
        return max(0.0, self.profile_for(namespace, inference).demand.at(now - self.origin))

    def sample(
        self,
        now: float,
        namespace: str,
        inference: str,
        replica: int,
        pod_started_at: float,
        ready_replicas: int,
    ) -> EngineSample:
        """What a pod of ``replica`` exports at ``now``, with ``ready_replicas`` sharing the demand."""
        profile = self.profile_for(namespace, inference)
        override = self.override_for(namespace, inference, replica)
        t = now - self.origin
        ready = max(1, ready_replicas)
        load = self.demand(now, namespace, inference) / ready
        utilization = _first_set(
            override.utilization, _clamp(load + self._noise(namespace, inference, replica, t))
        )
        age = max(0.0, now - pod_started_at)
        model_fragmentation = profile.fragmentation_for(replica).at(age)
        fragmentation = _first_set(override.fragmentation, model_fragmentation)
        waiting = _first_set(override.queue, round(max(0.0, load - 1.0) * profile.max_running_requests))
        slack = _clamp(fragmentation + (1.0 - fragmentation) * _IDLE_SLACK * (1.0 - utilization))
        hbm_used = round(
            profile.hbm_total_bytes
            * _clamp(profile.hbm_static_fraction + profile.hbm_dynamic_fraction * utilization)
        )
        return EngineSample(
            utilization=utilization,
            fragmentation=fragmentation,
            slack=slack,
            hbm_used_bytes=hbm_used,
            hbm_total_bytes=profile.hbm_total_bytes,
            # The engine's caching allocator holds all the HBM the engine uses; slack is what it holds idle.
            reserved_bytes=hbm_used,
            allocated_bytes=round(hbm_used * (1.0 - slack)),
            requests_running=round(utilization * profile.max_running_requests),
            requests_waiting=max(0, waiting),
            kv_cache_usage=_clamp(_KV_IDLE + _KV_SPAN * utilization),
            # A counter must never go down while the pod lives: age x a non-decreasing ratio never does.
            alloc_retries=math.floor(age * model_fragmentation),
            cores=core_readings(profile.chip, utilization),
            chip=profile.chip,
        )

    def _noise(self, namespace: str, inference: str, replica: int, t: float) -> float:
        """Deterministic noise in [-noise, noise), fixed for each replica and whole second."""
        if self.noise <= 0:
            return 0.0
        key = f"{self.seed}|{namespace}/{inference}|{replica}|{math.floor(t)}".encode()
        unit = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
        return self.noise * (2.0 * unit - 1.0)

    # Overrides ----------------------------------------------------------------------------

    def set(
        self,
        namespace: str,
        inference: str,
        replica: int | None = None,
        *,
        utilization: float | None = None,
        fragmentation: float | None = None,
        queue: int | None = None,
    ) -> None:
        """Pin values for one replica (or all, with ``replica=None``); ``None`` leaves a field as it was."""
        for name, value in (("utilization", utilization), ("fragmentation", fragmentation)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} is a ratio between 0 and 1, got {value!r}")
        if queue is not None and queue < 0:
            raise ValueError(f"queue is a number of waiting requests, got {queue!r}")
        key = (namespace, inference, replica)
        with self._lock:
            current = self._overrides.get(key, _NO_OVERRIDE)
            overrides = dict(self._overrides)
            overrides[key] = Override(utilization, fragmentation, queue).merged_over(current)
            # Replaced, not mutated: samplers on other threads read the dict without the lock.
            self._overrides = overrides

    def clear(self, namespace: str | None = None, inference: str | None = None) -> None:
        """Drop overrides: all of them, those of a namespace, or those of one inference."""
        with self._lock:
            self._overrides = {
                key: value
                for key, value in self._overrides.items()
                if not (namespace in (None, key[0]) and inference in (None, key[1]))
            }

    def override_for(self, namespace: str, inference: str, replica: int) -> Override:
        """The pinned values for one replica: its own fields first, then those set for all replicas."""
        overrides = self._overrides
        every = overrides.get((namespace, inference, None), _NO_OVERRIDE)
        return overrides.get((namespace, inference, replica), _NO_OVERRIDE).merged_over(every)


# Parsing -------------------------------------------------------------------------------------

_PROFILE_KEYS = {
    "demand",
    "fragmentation",
    "max_running_requests",
    "hbm_total_gib",
    "hbm_static_fraction",
    "hbm_dynamic_fraction",
    "chip",
}
_FRAGMENTATION_KEYS = {"start", "per_minute", "max"}


def _duration(value: Any, where: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


def _parse_scenario(data: Any) -> dict[str, Any]:
    """Keyword arguments for :class:`Scenario` from the top-level mapping."""
    data = _mapping(data, "the top level", {"seed", "noise", "inferences"})
    inferences = _mapping(data.get("inferences", {}), "inferences", None)
    profiles = {str(key): _parse_profile(value, f"inferences.{key}") for key, value in inferences.items()}
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ScenarioError(f"seed: expected an integer, got {seed!r}")
    return {"profiles": profiles, "seed": seed, "noise": _fraction(data.get("noise", 0.02), "noise")}


def _parse_profile(data: Any, where: str) -> Profile:
    data = _mapping(data, where, _PROFILE_KEYS)
    defaults = Profile()
    fragmentation, per_replica = _parse_fragmentation(data.get("fragmentation", {}), f"{where}.fragmentation")
    hbm_gib = _number(data.get("hbm_total_gib", defaults.hbm_total_bytes / GIB), f"{where}.hbm_total_gib")
    chip = data.get("chip", defaults.chip)
    if chip not in CHIPS:
        raise ScenarioError(f"{where}.chip: expected one of {', '.join(CHIPS)}, got {chip!r}")
    max_running = data.get("max_running_requests", defaults.max_running_requests)
    if isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1:
        raise ScenarioError(f"{where}.max_running_requests: expected a positive integer, got {max_running!r}")
    return Profile(
        demand=_parse_curve(data.get("demand", 0.0), f"{where}.demand"),
        fragmentation=fragmentation,
        replica_fragmentation=per_replica,
        max_running_requests=max_running,
        hbm_total_bytes=round(hbm_gib * GIB),
        hbm_static_fraction=_fraction(
            data.get("hbm_static_fraction", defaults.hbm_static_fraction), f"{where}.hbm_static_fraction"
        ),
        hbm_dynamic_fraction=_fraction(
            data.get("hbm_dynamic_fraction", defaults.hbm_dynamic_fraction), f"{where}.hbm_dynamic_fraction"
        ),
        chip=chip,
    )


def _parse_fragmentation(data: Any, where: str) -> tuple[FragmentationModel, dict[int, FragmentationModel]]:
    data = _mapping(data, where, _FRAGMENTATION_KEYS | {"replicas"})
    base = _fragmentation_fields(data, FragmentationModel(), where)
    per_replica = {}
    for key, value in _mapping(data.get("replicas", {}), f"{where}.replicas", None).items():
        if not str(key).isdigit():
            raise ScenarioError(f"{where}.replicas: keys are replica indexes (0, 1, ...), got {key!r}")
        entry = f"{where}.replicas.{key}"
        per_replica[int(key)] = _fragmentation_fields(
            _mapping(value, entry, _FRAGMENTATION_KEYS), base, entry
        )
    return base, per_replica


def _fragmentation_fields(
    data: Mapping[str, Any], base: FragmentationModel, where: str
) -> FragmentationModel:
    model = replace(
        base,
        start=_fraction(data.get("start", base.start), f"{where}.start"),
        per_minute=_number(data.get("per_minute", base.per_minute), f"{where}.per_minute"),
        max=_fraction(data.get("max", base.max), f"{where}.max"),
    )
    if model.start > model.max:
        raise ScenarioError(f"{where}: start ({model.start}) is above max ({model.max})")
    return model


def _parse_curve(data: Any, where: str) -> Curve:
    """A demand curve from a number, a list of ``[time, value]`` points, or ``start`` + ``phases``."""
    if isinstance(data, int | float) and not isinstance(data, bool):
        return Curve(((0.0, _number(data, where)),))
    if isinstance(data, list):
        return _curve_from_points(data, where)
    data = _mapping(
        data, where, {"start", "phases", "repeat"}, what="a number, a list of points or a mapping"
    )
    repeat = data.get("repeat", False)
    if not isinstance(repeat, bool):
        raise ScenarioError(f"{where}.repeat: expected true or false, got {repeat!r}")
    points = _points_from_phases(
        _number(data.get("start", 0.0), f"{where}.start"), data.get("phases", []), where
    )
    if repeat and points[-1][0] <= 0:
        raise ScenarioError(f"{where}.repeat: a repeating curve needs phases that take some time")
    return Curve(points, repeat=repeat)


def _curve_from_points(data: Sequence[Any], where: str) -> Curve:
    if not data:
        raise ScenarioError(f"{where}: a list of points needs at least one [time, value]")
    points = []
    for index, point in enumerate(data):
        entry = f"{where}[{index}]"
        if not isinstance(point, list | tuple) or len(point) != 2:
            raise ScenarioError(f"{entry}: expected [time, value], got {point!r}")
        points.append((_duration(point[0], entry), _number(point[1], entry)))
    if any(later[0] < earlier[0] for earlier, later in zip(points, points[1:], strict=False)):
        raise ScenarioError(f"{where}: point times must not decrease")
    return Curve(tuple(points))


def _points_from_phases(start: float, phases: Any, where: str) -> tuple[tuple[float, float], ...]:
    if not isinstance(phases, list):
        raise ScenarioError(f"{where}.phases: expected a list, got {type(phases).__name__}")
    t, value = 0.0, start
    points = [(t, value)]
    for index, phase in enumerate(phases):
        entry = f"{where}.phases[{index}]"
        phase = _mapping(phase, entry, {"hold", "to", "over"})
        if set(phase) == {"hold"}:
            t += _duration(phase["hold"], f"{entry}.hold")
        elif set(phase) == {"to", "over"}:
            t += _duration(phase["over"], f"{entry}.over")
            value = _number(phase["to"], f"{entry}.to")
        else:
            raise ScenarioError(
                f"{entry}: expected {{hold: <duration>}} or {{to: <value>, over: <duration>}}"
            )
        points.append((t, value))
    return tuple(points)


def _mapping(
    data: Any, where: str, allowed: Iterable[str] | None, *, what: str = "a mapping"
) -> dict[Any, Any]:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where}: expected {what}, got {type(data).__name__}")
    if allowed is not None:
        allowed = set(allowed)
        unknown = sorted(str(key) for key in data if key not in allowed)
        if unknown:
            raise ScenarioError(
                f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
            )
    return dict(data)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ScenarioError(f"{where}: expected a non-negative number, got {value!r}")
    return float(value)


def _fraction(value: Any, where: str) -> float:
    number = _number(value, where)
    if number > 1:
        raise ScenarioError(f"{where}: expected a fraction between 0 and 1, got {value!r}")
    return number


def _clamp(value: float, low: float = 0.0, high: float = 1.0) -> float:
    return min(high, max(low, value))


def _first_set(value: Any, fallback: Any) -> Any:
    return fallback if value is None else value
