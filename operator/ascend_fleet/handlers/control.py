"""kopf wiring of the control loop: started with the operator, stopped with it.

The loop is one asyncio task on kopf's event loop (its blocking calls run in worker threads), so it
lives and dies with the operator process: ``@kopf.on.startup`` starts it, ``@kopf.on.cleanup``
cancels it. Register it through ``OperatorContext.extra_startup``::

    ctx.extra_startup.append(control_loop_hook(ControlLoop(settings, kube)))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import kopf

from ..control.loop import ControlLoop

log = logging.getLogger(__name__)


def control_loop_hook(loop: ControlLoop) -> Callable[[kopf.OperatorRegistry], None]:
    """A hook for ``OperatorContext.extra_startup`` that runs ``loop`` for the operator's lifetime."""

    def install(registry: kopf.OperatorRegistry) -> None:
        tasks: list[asyncio.Task] = []

        @kopf.on.startup(registry=registry)
        async def start_control_loop(**_) -> None:
            tasks.append(asyncio.create_task(loop.run(), name="ascend-fleet-control-loop"))

        @kopf.on.cleanup(registry=registry)
        async def stop_control_loop(**_) -> None:
            while tasks:
                task = tasks.pop()
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            log.info("control loop stopped")

    return install
