"""kopf wiring of the control loop: started with the operator, stopped with it.

The loop is one asyncio task on kopf's event loop (its blocking calls run in worker threads), so it
lives and dies with the operator process: ``@kopf.on.startup`` starts it, ``@kopf.on.cleanup``
cancels it. Register it through ``OperatorContext.extra_startup``::

    ctx.extra_startup.append(control_loop_hook(ControlLoop(settings, kube)))

Unless the loop was given a source of its own (the benchmark's list baseline), it reads the fleet
from the operator's watch cache: the ``inferences`` and ``engine_pods`` kopf indexes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import kopf

from ..control.loop import ControlLoop, ListSource, Pods

_log = logging.getLogger(__name__)


class CacheSource:
    """The fleet as the operator's kopf indexes hold it: no API request per cycle.

    Read on kopf's event loop, where the indexes are updated, so a cycle sees one consistent moment;
    the copies are shallow (the indexed values are detached snapshots that are replaced, never mutated).
    """

    list_calls = 0

    def __init__(self, inferences: kopf.Index, engine_pods: kopf.Index):
        self.inferences, self.engine_pods = inferences, engine_pods

    async def read(self) -> tuple[list[dict], Pods]:
        bodies = [body for store in self.inferences.values() for body in store]
        pods = {key: list(store) for key, store in self.engine_pods.items()}
        return bodies, pods


def control_loop_hook(
    loop: ControlLoop, run: Callable[[ControlLoop], Coroutine[Any, Any, object]] | None = None
) -> Callable[[kopf.OperatorRegistry], None]:
    """A hook for ``OperatorContext.extra_startup`` that runs ``loop`` for the operator's lifetime.

    ``run`` replaces ``loop.run()`` (the benchmark drives its own cycles on kopf's loop).
    """

    def install(registry: kopf.OperatorRegistry) -> None:
        tasks: list[asyncio.Task] = []

        # kopf hands indexes over as keyword arguments named by their ids, which its ActivityFn cannot declare.
        @kopf.on.startup(registry=registry)  # type: ignore[arg-type]
        async def start_control_loop(inferences: kopf.Index, engine_pods: kopf.Index, **_) -> None:
            if isinstance(loop.source, ListSource) and loop.source_is_default:
                loop.source = CacheSource(inferences, engine_pods)
            body = loop.run() if run is None else run(loop)
            tasks.append(asyncio.create_task(body, name="ascend-fleet-control-loop"))

        @kopf.on.cleanup(registry=registry)
        async def stop_control_loop(**_) -> None:
            while tasks:
                task = tasks.pop()
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            _log.info("control loop stopped")

    return install
