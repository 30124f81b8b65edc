"""What the operator reports on an AscendInference: conditions, layout, actions, restarts and tuning."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .actions import ACTION_LIST
from .fields import Action, Model


class TrafficShare(Model):
    """One variant's share of the requests for the base model name."""

    variant: str = Field(description="The variant (spec.variants[].name).")
    weight: int = Field(description="Percent of the requests the endpoint picker sends to it.")


class Condition(Model):
    """A standard Kubernetes condition (metav1.Condition shape)."""

    type: str = Field(
        description="Ready, Progressing, Degraded, MetricsAvailable or KVTransfer (two-role fleets)."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="A CamelCase word for why (see docs/troubleshooting.md).")
    message: str = Field(default="", description="What the operator saw and what to do, in a sentence.")
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the condition was computed from."
    )


class LayoutStatus(Model):
    """How the parallelism maps onto NPUs and pods."""

    npus_per_replica: int = Field(description="NPUs of one replica: tensor x pipeline.")
    pods_per_replica: int = Field(description="Pods of one replica (a gang): one per node it spans.")
    npus_per_pod: int = Field(description="NPUs each pod requests.")
    total_npus: int = Field(description="NPUs of every replica together.")


class RoleStatus(Model):
    """One role's replicas in a fleet with spec.disaggregation."""

    replicas: int = Field(default=0, description="The role's replicas (gangs) that exist, ready or not.")
    ready_replicas: int = Field(default=0, description="The role's replicas whose every pod is ready.")
    updated_replicas: int = Field(default=0, description="The role's replicas running the current revision.")
    layout: LayoutStatus | None = Field(
        default=None, description="How the role's parallelism maps onto NPUs and pods."
    )


class RolesStatus(Model):
    """Each role's replicas; the fleet is Ready only when every replica of both roles is."""

    prefill: RoleStatus | None = Field(default=None, description="The prefill instances.")
    decode: RoleStatus | None = Field(default=None, description="The decode instances.")


class ActionRecord(Model):
    """One control-loop decision, newest first in status.actions."""

    time: str = Field(description="RFC 3339 time of the decision.")
    rule: str = Field(description="The rule's name, or its text.")
    metric: str | None = Field(
        default=None, description="The catalog metric the rule reads (absent for a query)."
    )
    value: float | None = Field(default=None, description="The value that held over the rule's window.")
    action: Action = Field(description=f"{ACTION_LIST}.")
    target: str = Field(
        description="fleet, or replica-N; on a two-role fleet the role (prefill, decode) or <role>-replica-N."
    )
    result: str = Field(
        default="", description="What happened, e.g. 'replicas 2 -> 3' or 'drained replica 1'."
    )
    dry_run: bool = Field(default=False, description="Recorded only: autoscaling.dryRun was on.")


class GroupRestart(Model):
    """How often a replica's gang was recreated after a failure, for the restart backoff."""

    replica: int = Field(description="The replica (data-parallel group) index.")
    role: Literal["prefill", "decode"] | None = Field(
        default=None, description="With spec.disaggregation: the role whose replica it is."
    )
    count: int = Field(description="Recreations in a row; the backoff doubles with each.")
    last_time: str = Field(description="RFC 3339 time of the last recreation.")


class TuningRung(Model):
    """One measured rung of a tuning ladder."""

    batch_size: int = Field(description="The maxBatchSize the rung ran with.")
    adaptive: str = Field(
        default="", description="Engine-native knobs the rung ran with, e.g. prefillDelayer."
    )
    tokens_per_second: float = Field(description="Output tokens per second the fleet served.")
    ttft_p50_ms: float = Field(description="Median time to first token, in milliseconds.")
    ttft_p99_ms: float = Field(description="99th percentile time to first token, in milliseconds.")
    e2e_latency_p99_ms: float = Field(description="99th percentile request latency, in milliseconds.")
    npu_utilization: float | None = Field(
        default=None, description="Mean NPU utilization (0..1) over the rung."
    )


class TuningRecord(Model):
    """What the last `ascend-fleet tune` measured and chose."""

    time: str = Field(description="RFC 3339 time the choice was written.")
    batch_size: int = Field(description="The maxBatchSize chosen.")
    adaptive: str = Field(default="", description="Engine-native knobs chosen with it, if any.")
    goal: str = Field(description="What the choice optimised, e.g. 'ttft_p99 <= 100ms' or 'max throughput'.")
    reason: str = Field(default="", description="Why this rung, in a sentence.")
    table_hash: str = Field(
        description="sha256 of the measured table (canonical JSON), to match it to its report."
    )
    client: str = Field(default="", description="The benchmark client that measured it.")
    rungs: list[TuningRung] = Field(default_factory=list, description="The measured table.")


class AscendInferenceStatus(Model):
    """What the operator observed and did (unknown fields are refused, as in every status model)."""

    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status was computed from."
    )
    replicas: int = Field(default=0, description="Replicas (gangs) that exist, ready or not.")
    ready_replicas: int = Field(default=0, description="Replicas whose every pod is ready.")
    updated_replicas: int = Field(default=0, description="Replicas running the current revision.")
    selector: str = Field(
        default="", description="Label selector of the leader pods (the scale subresource's)."
    )
    revision: str | None = Field(default=None, description="Hash of the current pod template.")
    layout: LayoutStatus | None = Field(
        default=None,
        description="How the parallelism maps onto NPUs and pods (absent with spec.disaggregation: each role's "
        "is in status.roles).",
    )
    roles: RolesStatus | None = Field(
        default=None,
        description="With spec.disaggregation: each role's replicas (replicas and readyReplicas above are the sums).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded, MetricsAvailable and KVTransfer (two-role fleets).",
    )
    actions: list[ActionRecord] = Field(
        default_factory=list, description="The control loop's latest decisions, newest first."
    )
    group_restarts: list[GroupRestart] = Field(
        default_factory=list, description="Failure recreations per replica (drives the backoff)."
    )
    tuning: TuningRecord | None = Field(
        default=None, description="The last batch-size tuning run (ascend-fleet tune)."
    )
    traffic: list[TrafficShare] | None = Field(
        default=None,
        description="With spec.variants: each variant's percent of the requests for model.name, as the "
        "endpoint picker's InferenceModelRewrite splits them: the traffic annotation's split, with the share of a "
        "variant that has no serving replica on one that serves.",
    )
