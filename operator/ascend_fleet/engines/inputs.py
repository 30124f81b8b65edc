"""What an engine reads of a fleet: the parts of the spec and of the layout its renderer turns into a pod.

Engines sit below ``api`` and ``layout`` (the API reads the engines' facts to default ports and images and to
state its checks), so the renderer names these protocols instead of ``AscendInferenceSpec`` and ``Layout``.
Those two satisfy them, which the type checker confirms where ``render`` hands them to an engine; an engine
that reads another field adds it here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class CompilationSettings(Protocol):
    """spec.engine.compilation."""

    @property
    def graph_mode(self) -> str | None: ...
    @property
    def max_capture_batch_size(self) -> int | None: ...
    @property
    def fusion(self) -> Sequence[str]: ...
    @property
    def cache_dir(self) -> str | None: ...


class EngineSettings(Protocol):
    """spec.engine."""

    @property
    def port(self) -> int | None: ...
    @property
    def args(self) -> Sequence[str]: ...
    @property
    def multi_node(self) -> str | None: ...
    @property
    def compilation(self) -> CompilationSettings | None: ...


class ModelSettings(Protocol):
    """spec.model."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def max_model_len(self) -> int | None: ...


class PrefillDelayerSettings(Protocol):
    """spec.batching.prefillDelayer."""

    @property
    def enabled(self) -> bool: ...
    @property
    def max_delay_ms(self) -> float | None: ...
    @property
    def queue_min_ratio(self) -> float | None: ...


class BatchingSettings(Protocol):
    """spec.batching."""

    @property
    def max_batch_size(self) -> int | None: ...
    @property
    def max_batch_tokens(self) -> int | None: ...
    @property
    def chunked_prefill(self) -> bool | None: ...
    @property
    def prefill_delayer(self) -> PrefillDelayerSettings | None: ...


class MemorySettings(Protocol):
    """spec.memory."""

    @property
    def static_fraction(self) -> float: ...
    @property
    def dynamic_fraction(self) -> float: ...


class SchedulingSettings(Protocol):
    """spec.scheduling."""

    @property
    def priority(self) -> bool: ...
    @property
    def policy(self) -> str: ...
    @property
    def short_request_tokens(self) -> int: ...
    @property
    def max_wait(self) -> float: ...


class RoleParallelismSettings(Protocol):
    """spec.disaggregation.<role>.parallelism."""

    @property
    def tensor(self) -> int: ...
    @property
    def pipeline(self) -> int: ...


class RoleSettings(Protocol):
    """spec.disaggregation.prefill or .decode."""

    @property
    def parallelism(self) -> RoleParallelismSettings: ...


class KvTransferSettings(Protocol):
    """spec.disaggregation.kvTransfer, its defaults filled in."""

    @property
    def connector(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...


class DisaggregationSettings(Protocol):
    """spec.disaggregation."""

    @property
    def prefill(self) -> RoleSettings: ...
    @property
    def decode(self) -> RoleSettings: ...
    @property
    def kv_transfer(self) -> KvTransferSettings: ...


class EngineSpec(Protocol):
    """The spec, as far as an engine reads it (``AscendInferenceSpec`` is one)."""

    @property
    def engine(self) -> EngineSettings: ...
    @property
    def model(self) -> ModelSettings: ...
    @property
    def batching(self) -> BatchingSettings: ...
    @property
    def memory(self) -> MemorySettings: ...
    @property
    def scheduling(self) -> SchedulingSettings: ...
    @property
    def precision(self) -> str: ...
    @property
    def disaggregation(self) -> DisaggregationSettings | None: ...

    def image(self) -> str | None:
        """The engine image to run (None: no image)."""
        ...


class EngineLayout(Protocol):
    """The replica's shape, as far as an engine reads it (``layout.Layout`` is one)."""

    @property
    def tensor(self) -> int: ...
    @property
    def pipeline(self) -> int: ...
    @property
    def pods_per_replica(self) -> int: ...
    @property
    def multi_pod(self) -> bool: ...
