"""The serving engines: one module per engine holds its facts and its renderer; ``registry`` selects one."""

from .base import Dialect, EngineFacts, EngineRenderer, EngineType, Flag, Rank
from .registry import UnknownEngine, engine_for, engine_types, facts_of, registered

__all__ = [
    "Dialect",
    "EngineRenderer",
    "EngineFacts",
    "EngineType",
    "Flag",
    "Rank",
    "UnknownEngine",
    "engine_for",
    "engine_types",
    "facts_of",
    "registered",
]
