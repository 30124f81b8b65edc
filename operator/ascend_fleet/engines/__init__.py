"""The serving engines: one module per engine holds its facts and its renderer; ``registry`` selects one."""

from .base import EngineFacts, EngineRenderer, EngineType, Flag, Rank
from .registry import UnknownEngine, engine_for, engine_types, facts_of, registered

__all__ = [
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
