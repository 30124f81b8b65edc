"""The one place an engine type selects its engine.

Production selection is closed: ``builtin`` matches every member of the ``EngineType`` literal and ends in
``assert_never``, so a type added to the literal without an engine fails the type check. The registry built
from it is the seam that is open: ``registered`` adds an engine for the duration of a ``with`` block (a test,
or a future engine module while it is being written) and removes it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import assert_never, get_args

from .base import EngineFacts, EngineRenderer, EngineType, repository
from .sglang import SGLang
from .vllm_ascend import VllmAscend


def builtin(engine_type: EngineType) -> EngineRenderer:
    """The engine of a production engine type."""
    match engine_type:
        case "vllm-ascend":
            return VllmAscend()
        case "sglang":
            return SGLang()
        case _:
            assert_never(engine_type)


BUILTIN_TYPES: tuple[EngineType, ...] = get_args(EngineType)
_ENGINES: dict[str, EngineRenderer] = {engine_type: builtin(engine_type) for engine_type in BUILTIN_TYPES}


class UnknownEngine(KeyError):
    """An engine type no engine is registered for."""


def engine_for(engine_type: str) -> EngineRenderer:
    """The engine registered for a type."""
    try:
        return _ENGINES[engine_type]
    except KeyError:
        raise UnknownEngine(engine_type) from None


def facts_of(engine_type: str) -> EngineFacts:
    """The facts of the engine registered for a type."""
    return engine_for(engine_type).facts


def engine_types() -> tuple[str, ...]:
    """Every registered engine type, the production ones first in the literal's order."""
    return tuple(_ENGINES)


def builtin_facts() -> tuple[EngineFacts, ...]:
    """The production engines' facts: what the CRD, the catalog and the docs are generated from."""
    return tuple(_ENGINES[engine_type].facts for engine_type in BUILTIN_TYPES)


def has_exporter(image: str) -> bool:
    """False for the registered engines' upstream images, which lack the project's exporter; True otherwise."""
    return not any(repository(image) in e.facts.upstream_repositories() for e in _ENGINES.values())


@contextmanager
def registered(engine: EngineRenderer) -> Iterator[EngineRenderer]:
    """Register an engine of a new type for the block, and unregister it afterwards."""
    engine_type = engine.facts.type
    if engine_type in _ENGINES:
        raise ValueError(f"engine type {engine_type!r} is registered already")
    _ENGINES[engine_type] = engine
    try:
        yield engine
    finally:
        del _ENGINES[engine_type]
