"""Every change the operator makes to kopf's behaviour, behind one seam, for one tested range of kopf.

kopf has no public switch for either of these, so the operator replaces two pieces of its internals:

- **The start-up barrier without N^2 wake-ups.** While kopf fills its indexes it holds each listed
  object's worker until every index is full: one toggle per object in one ``ToggleSet``, and every
  worker that has indexed its object waits on the set's condition. kopf wakes *all* of those waiters
  whenever a toggle is added or dropped, although the set's answer (``all`` toggles on) only changes
  when its last toggle goes. With N objects that is N wake-ups for each of 2N changes: the operator's
  start-up grew with the square of the fleet (at 5,000 objects 95 to 171 s to fill the caches, nearly
  all of it in ``Condition.notify_all`` and the woken tasks). The replacement wakes the waiters only
  when the set's answer changes. A waiter on the set waits for that answer, and a waiter on one toggle
  for that toggle's own state, which neither adding nor dropping another toggle changes, so no waiter
  misses its moment; turning a toggle on or off still wakes everyone, as shipped.
- **Daemons without finalizers.** kopf puts a finalizer on every object that has a daemon, so that it
  can stop the daemon before the object goes: one PATCH on create and one on delete per object, and an
  object that cannot be deleted while the operator is down. Neither is needed here: the children carry
  ownerReferences (the garbage collector removes them), and the daemon ends itself on the object's
  DELETED event. The registered daemon handlers are marked ``requires_finalizer=False``.

Both rely on kopf's private attributes, so :func:`install` first checks the installed version against
:data:`SUPPORTED_KOPF` (the range ``pyproject.toml`` pins) and probes every attribute the replacements
use; a kopf it does not know is refused with :class:`UnsupportedKopf` instead of patched half-way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import re
import sys
from collections.abc import Callable
from typing import Any

import kopf

# The kopf releases these patches were read against and tested with: [low, high) by (major, minor).
SUPPORTED_KOPF = ((1, 45), (1, 46))
SUPPORTED_KOPF_TEXT = "kopf>=1.45,<1.46"
_PATCHED = "_ascend_fleet_notify_on_change_only"
SHIPPED = (
    "_ascend_fleet_shipped"  # kopf's own methods, kept on the patched class (bench/reconcile/barrier.py)
)
_REPLACED = ("make_toggle", "drop_toggle", "drop_toggles")


class UnsupportedKopf(RuntimeError):
    """The installed kopf is outside the tested range, or lacks an internal the patches use."""


def install(registry: kopf.OperatorRegistry, version: str | None = None) -> None:
    """Check kopf, patch its start-up barrier (once per process) and mark ``registry``'s daemons.

    Idempotent: called for every registry the operator builds, it patches kopf's class only the first time.
    """
    check_version(installed_kopf() if version is None else version)
    toggle_set = toggle_set_class()
    missing = probe_toggle_set(toggle_set) + probe_registry(registry)
    if missing:
        raise UnsupportedKopf(
            f"kopf {installed_kopf()} lacks what the operator's patches use ({', '.join(missing)}); "
            f"install {SUPPORTED_KOPF_TEXT}"
        )
    notify_on_change_only(toggle_set)
    daemons_without_finalizer(registry)


def installed_kopf() -> str:
    """The version of the kopf distribution installed."""
    return importlib.metadata.version("kopf")


def check_version(version: str) -> None:
    """Refuse a kopf outside :data:`SUPPORTED_KOPF`, naming both."""
    if not supported(version):
        raise UnsupportedKopf(
            f"kopf {version} is installed but the operator patches kopf's internals and supports "
            f"{SUPPORTED_KOPF_TEXT} only (see docs/decisions.md, kopf patches)"
        )


def supported(version: str) -> bool:
    """Whether ``version`` (``1.45.2``, ``1.45.0rc1``) is inside :data:`SUPPORTED_KOPF` (pure)."""
    match = re.match(r"^(\d+)\.(\d+)", version)
    if match is None:
        return False
    major, minor = int(match.group(1)), int(match.group(2))
    low, high = SUPPORTED_KOPF
    return low <= (major, minor) < high


def toggle_set_class() -> type:
    """kopf's ``ToggleSet`` (private: ``kopf._cogs.aiokits.aiotoggles``)."""
    try:
        from kopf._cogs.aiokits import aiotoggles
    except ImportError as error:
        raise UnsupportedKopf(
            f"kopf {installed_kopf()} has no kopf._cogs.aiokits.aiotoggles; install {SUPPORTED_KOPF_TEXT}"
        ) from error
    return aiotoggles.ToggleSet


def probe_toggle_set(toggle_set: type) -> list[str]:
    """What the barrier's replacement uses and ``toggle_set`` lacks (empty: all there)."""
    missing = [f"ToggleSet.{n}" for n in (*_REPLACED, "is_on") if not callable(getattr(toggle_set, n, None))]
    toggle = _toggle_class(toggle_set)
    if toggle is None:
        return [*missing, "Toggle"]
    try:
        instance = toggle_set(all)
    except TypeError:
        return [*missing, "ToggleSet(fn)"]
    if not isinstance(getattr(instance, "_condition", None), asyncio.Condition):
        missing.append("ToggleSet._condition")
    if not isinstance(getattr(instance, "_toggles", None), set):
        missing.append("ToggleSet._toggles")
    condition = asyncio.Condition()
    try:
        made = toggle(False, name="probe", condition=condition)
    except TypeError:
        return [*missing, "Toggle(state, name=, condition=)"]
    if getattr(made, "_condition", None) is not condition:
        missing.append("Toggle._condition")
    return missing


def probe_registry(registry: Any) -> list[str]:
    """What marking daemons uses and ``registry`` lacks (empty: all there)."""
    handlers = getattr(getattr(registry, "_spawning", None), "_handlers", None)
    if not isinstance(handlers, list):
        return ["OperatorRegistry._spawning._handlers"]
    from kopf._core.intents import handlers as handler_types

    daemon = getattr(handler_types, "DaemonHandler", None)
    if not (isinstance(daemon, type) and dataclasses.is_dataclass(daemon)):
        return ["DaemonHandler (a dataclass)"]
    if "requires_finalizer" not in {f.name for f in dataclasses.fields(daemon)}:
        return ["DaemonHandler.requires_finalizer"]
    return []


def daemons_without_finalizer(registry: Any) -> None:
    """Mark every daemon registered so far as needing no finalizer (see the module's docstring)."""
    handlers = registry._spawning._handlers
    handlers[:] = [
        dataclasses.replace(h, requires_finalizer=False) if getattr(h, "requires_finalizer", None) else h
        for h in handlers
    ]


def needs_wakeup(before: bool, after: bool) -> bool:
    """Whether a change of a toggle set's membership must wake its waiters (pure)."""
    return before != after


def notify_on_change_only(toggle_set: Any) -> bool:
    """Patch ``toggle_set`` (kopf's ``ToggleSet`` or a copy) once; returns whether the patch is in place.

    ``toggle_set`` is typed ``Any``: its shape is checked here at run time, and the patch assigns methods.
    """
    if getattr(toggle_set, _PATCHED, False):
        return True
    toggle_class = _toggle_class(toggle_set)
    if toggle_class is None or probe_toggle_set(toggle_set):
        return False

    async def make_toggle(self, __val: bool = False, *, name: str | None = None):
        toggle = toggle_class(__val, name=name, condition=self._condition)
        await _change(self, lambda: self._toggles.add(toggle))
        return toggle

    async def drop_toggle(self, toggle) -> None:
        await _change(self, lambda: self._toggles.discard(toggle))

    async def drop_toggles(self, toggles) -> None:
        await _change(self, lambda: self._toggles.difference_update(toggles))

    setattr(toggle_set, SHIPPED, {n: getattr(toggle_set, n) for n in _REPLACED})
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
    module = sys.modules.get(toggle_set.__module__)
    toggle = getattr(module, "Toggle", None)
    return toggle if isinstance(toggle, type) else None
