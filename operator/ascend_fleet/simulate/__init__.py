"""A deterministic simulator of one AscendInference fleet, to compare how policies steer it.

``ascend-fleet simulate`` and ``python -m bench.policy`` run request traces through a fleet of
continuously batching engines (a batch-size curve, cold starts, fragmentation) under a static size,
a Kubernetes HPA and the project's rules, the latter decided by the operator's own evaluation code.
Pure Python; matplotlib only for the optional PNG. See docs/simulator.md.
"""

from .curve import BatchCurve
from .model import EngineModel, FleetConfig, FleetPolicy, FleetView, Result, TickDecision, simulate
from .policies import HpaPolicy, StaticPolicy
from .report import Summary, summarize, table, verdict
from .rules import RulesPolicy
from .run import POLICIES, fleet_config, load_spec, make_policy, peak_replicas, run_all
from .traces import BUILT_IN, Trace, generate, load_csv, trace_by_name

__all__ = [
    "BUILT_IN",
    "POLICIES",
    "BatchCurve",
    "TickDecision",
    "EngineModel",
    "FleetConfig",
    "FleetView",
    "HpaPolicy",
    "FleetPolicy",
    "Result",
    "RulesPolicy",
    "StaticPolicy",
    "Summary",
    "Trace",
    "fleet_config",
    "generate",
    "load_csv",
    "load_spec",
    "make_policy",
    "peak_replicas",
    "run_all",
    "simulate",
    "summarize",
    "table",
    "trace_by_name",
    "verdict",
]
