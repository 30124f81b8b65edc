"""Putting a run together: the fleet an AscendInference spec describes, the policies, the trace."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..api.settings import ControlSettings
from ..api.v1alpha1 import AscendInference, AscendInferenceSpec
from ..api.variants import default_weights
from ..layout import LayoutError, plan
from .model import EngineModel, FleetConfig, FleetPolicy, Result, simulate
from .policies import HpaPolicy, StaticPolicy
from .rules import RulesPolicy
from .traces import Trace
from .variants import sim_variants

POLICIES = ("static", "hpa", "rules", "rules-no-restart")
DEFAULT_SPEC = "examples/vllm-tp4-pp2-dp2.yaml"
# A static fleet sized for the peak runs its busiest 10 minutes at the scale-up threshold of the seeds' rules.
PEAK_WINDOW = 600.0
PEAK_UTILIZATION = 0.85


class SpecError(ValueError):
    """The spec file cannot drive a simulation; the message says why and what would."""


def default_spec_path() -> Path:
    """The seeds' example: beside the source tree when run from a checkout, else in the working directory."""
    beside_source = Path(__file__).resolve().parents[3] / DEFAULT_SPEC
    return beside_source if beside_source.is_file() else Path(DEFAULT_SPEC)


def load_spec(path: str | Path | None = None) -> AscendInferenceSpec:
    """The first AscendInference in a YAML file, validated as the operator validates it."""
    path = Path(path) if path else default_spec_path()
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except OSError as error:
        raise SpecError(f"cannot read {path}: {error.strerror or error}; pass --spec FILE") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path} is not YAML: {error}") from None
    body = next((d for d in documents if isinstance(d, dict) and d.get("kind") == "AscendInference"), None)
    if body is None:
        raise SpecError(f"{path} holds no AscendInference document")
    try:
        spec = AscendInference.model_validate(body).spec
        plan(spec)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        raise SpecError(f"{path}: {problems}") from None
    except LayoutError as error:
        raise SpecError(f"{path}: {error}") from None
    return spec


def fleet_config(
    spec: AscendInferenceSpec, engine: EngineModel | None = None, settings: ControlSettings | None = None
) -> FleetConfig:
    """The simulated fleet for a spec: NPUs per replica from its layout, batch limit, memory split, bounds.

    Fragmentation starts to hurt once it exceeds the reserve fraction, slows steps in proportion to the
    share of the dynamic pool it eats, and crashes the engine when it has eaten reserve and dynamic pools.
    """
    engine = engine or EngineModel()
    memory = spec.memory
    engine = replace(
        engine,
        max_batch=spec.batching.max_batch_size or engine.curve.largest_batch,
        penalty_start=memory.reserve_fraction,
        slowdown_per_fragmentation=1.0 / memory.dynamic_fraction if memory.dynamic_fraction > 0 else 4.0,
        oom_fragmentation=memory.reserve_fraction + memory.dynamic_fraction,
    )
    settings = settings or ControlSettings()
    return FleetConfig(
        engine=engine,
        npus_per_replica=plan(spec).npus_per_replica,
        initial_replicas=spec.parallelism.data,
        min_replicas=spec.autoscaling.min_replicas,
        max_replicas=spec.autoscaling.max_replicas,
        drain_seconds=float(spec.disruption.drain_seconds),
        scrape_interval=float(settings.step),
        # Keep every scrape the longest rule window can read, as Prometheus's retention would.
        metric_retention=max(
            [3600.0, *(float(r.for_) + 2 * float(settings.step) for r in spec.rules_in_force())]
        ),
        variants=sim_variants(spec),
        traffic=tuple(default_weights(spec.variants).items()),
    )


def peak_replicas(trace: Trace, config: FleetConfig) -> int:
    """Replicas that serve the trace's busiest 10 minutes of output tokens at 85 % of full-batch throughput."""
    engine = config.engine
    capacity = engine.curve.throughput(engine.max_batch) * PEAK_UTILIZATION
    windows: dict[int, int] = {}
    for arrival, tokens in zip(trace.arrivals, trace.output_tokens, strict=True):
        key = int(arrival // PEAK_WINDOW)
        windows[key] = windows.get(key, 0) + tokens
    span = min(PEAK_WINDOW, trace.duration)
    busiest = max(windows.values(), default=0) / span if span > 0 else 0.0
    return max(1, math.ceil(busiest / capacity - 1e-9))


def make_policy(
    name: str,
    spec: AscendInferenceSpec,
    trace: Trace,
    config: FleetConfig,
    replicas: int | None = None,
    hpa_target: float = 0.70,
    settings: ControlSettings | None = None,
) -> tuple[FleetPolicy, FleetConfig]:
    """A policy by name and the fleet it starts with (a static fleet starts at its own size)."""
    settings = settings or ControlSettings()
    if name == "static":
        count = replicas if replicas is not None else peak_replicas(trace, config)
        return StaticPolicy(count, name=f"static-{count}"), replace(config, initial_replicas=count)
    if name == "hpa":
        return HpaPolicy(target=hpa_target, interval=float(settings.interval)), config
    if name == "rules":
        return RulesPolicy(spec, settings=settings), config
    if name == "rules-no-restart":
        return RulesPolicy(spec, name=name, restarts=False, settings=settings), config
    raise ValueError(f"unknown policy {name!r}; use one of {', '.join(POLICIES)} or all")


def run_all(
    spec: AscendInferenceSpec,
    trace: Trace,
    names: tuple[str, ...] = POLICIES,
    *,
    replicas: int | None = None,
    engine: EngineModel | None = None,
    hpa_target: float = 0.70,
    settings: ControlSettings | None = None,
) -> list[Result]:
    """One run per policy on the same trace and fleet."""
    base = fleet_config(spec, engine, settings)
    results = []
    for name in names:
        policy, config = make_policy(name, spec, trace, base, replicas, hpa_target, settings)
        results.append(simulate(config, trace, policy))
    return results
