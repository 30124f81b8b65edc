"""kopf's readiness barrier without a wake-up of every waiter per object listed.

While kopf fills its indexes it holds each listed object's worker until every index is full: one toggle
per object in one ``ToggleSet``, and every worker that has indexed its object waits on the set's condition.
kopf wakes *all* of those waiters whenever a toggle is added or dropped, although the set's answer
(``all`` toggles on) only changes when its last toggle goes. With N objects that is N wake-ups for each of
2N changes: the operator's start-up grew with the square of the fleet (at 5,000 objects 95 to 171 s to
fill the caches, nearly all of it in ``Condition.notify_all`` and the woken tasks).

:func:`notify_on_change_only` makes adding and dropping a toggle wake the waiters only when the set's
answer changes. A waiter on the set waits for that answer, and a waiter on one toggle for that toggle's
own state, which neither adding nor dropping another toggle changes, so no waiter misses its moment.
Turning a toggle on or off still wakes everyone, as before. If kopf's internals ever change shape the
patch is not applied and kopf behaves as shipped (slower at start, never wrong).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
_PATCHED = "_ascend_fleet_notify_on_change_only"
SHIPPED = (
    "_ascend_fleet_shipped"  # kopf's own methods, kept on the patched class (bench/reconcile/barrier.py)
)


def needs_wakeup(before: bool, after: bool) -> bool:
    """Whether a change of a toggle set's membership must wake its waiters (pure)."""
    return before != after


def notify_on_change_only(toggle_set: Any = None) -> bool:
    """Patch kopf's ``ToggleSet`` (or the class given) once; returns whether the patch is in place.

    ``toggle_set`` is typed ``Any``: its shape is checked here at run time, and the patch assigns methods."""
    if toggle_set is None:
        try:
            from kopf._cogs.aiokits import aiotoggles
        except ImportError:
            return False
        toggle_set = aiotoggles.ToggleSet
    if getattr(toggle_set, _PATCHED, False):
        return True
    required = ("make_toggle", "drop_toggle", "drop_toggles", "is_on")
    if not all(callable(getattr(toggle_set, name, None)) for name in required):
        log.info("kopf's ToggleSet has changed shape; its readiness barrier is left as shipped")
        return False
    toggle_class = _toggle_class(toggle_set)
    if toggle_class is None:
        log.info("kopf's Toggle has changed shape; its readiness barrier is left as shipped")
        return False

    async def make_toggle(self, __val: bool = False, *, name: str | None = None):
        toggle = toggle_class(__val, name=name, condition=self._condition)
        await _change(self, lambda: self._toggles.add(toggle))
        return toggle

    async def drop_toggle(self, toggle) -> None:
        await _change(self, lambda: self._toggles.discard(toggle))

    async def drop_toggles(self, toggles) -> None:
        await _change(self, lambda: self._toggles.difference_update(toggles))

    setattr(
        toggle_set,
        SHIPPED,
        {n: getattr(toggle_set, n) for n in ("make_toggle", "drop_toggle", "drop_toggles")},
    )
    toggle_set.make_toggle = make_toggle
    toggle_set.drop_toggle = drop_toggle
    toggle_set.drop_toggles = drop_toggles
    setattr(toggle_set, _PATCHED, True)
    return True


async def _change(toggle_set, mutate: Callable[[], None]) -> None:
    async with toggle_set._condition:
        before = toggle_set.is_on()
        mutate()
        if needs_wakeup(before, toggle_set.is_on()):
            toggle_set._condition.notify_all()


def _toggle_class(toggle_set: type) -> type | None:
    """The class of the toggles a set makes (kopf's ``Toggle``, next to the set in its module)."""
    import sys

    module = sys.modules.get(toggle_set.__module__)
    toggle = getattr(module, "Toggle", None)
    return toggle if isinstance(toggle, type) else None
