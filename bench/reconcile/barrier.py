"""kopf's start-up barrier alone, as shipped and as the operator patches it (``handlers/kopf_compat.py``).

    python -m bench.reconcile.barrier [--objects 1000,2000,4000]

Replays what kopf's watcher does while it lists N objects of an indexed kind -- a toggle per object, then
the object's worker, which indexes it, drops its toggle and waits until every index is full -- with no
API server, and prints the waiters woken and the seconds it took, shipped against patched, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from kopf._cogs.aiokits import aiotoggles

from ascend_fleet.handlers.kopf_compat import SHIPPED, notify_on_change_only


class CountingCondition(asyncio.Condition):
    """An asyncio.Condition that counts the waiters it wakes."""

    woken = 0

    def notify_all(self) -> None:
        CountingCondition.woken += sum(1 for waiter in self._waiters if not waiter.done())
        super().notify_all()


def toggle_set_copy(patched: bool) -> type:
    """A subclass of kopf's ToggleSet, patched or not, whatever the process has done to kopf's own."""
    copy = type("ToggleSetCopy", (aiotoggles.ToggleSet,), {"__module__": aiotoggles.__name__})
    for name in ("make_toggle", "drop_toggle", "drop_toggles"):
        if not patched:  # kopf's methods as shipped, even where the operator patched the class
            setattr(copy, name, _SHIPPED[name])
    if patched:
        notify_on_change_only(copy)
    return copy


_SHIPPED = getattr(aiotoggles.ToggleSet, SHIPPED, None) or {
    name: getattr(aiotoggles.ToggleSet, name) for name in ("make_toggle", "drop_toggle", "drop_toggles")
}


async def barrier(toggle_set_class: type, objects: int) -> tuple[int, list[bool]]:
    """kopf's start-up for ``objects`` listed objects; returns the waiters woken and, per worker, whether
    it passed only after the listing's own toggle was gone."""
    toggles = toggle_set_class(all)
    toggles._condition = CountingCondition()
    CountingCondition.woken = 0
    blocker = await toggles.make_toggle(name="listing")
    released: list[bool] = []

    async def worker(mine) -> None:
        await asyncio.sleep(0)  # the index handler
        await toggles.drop_toggle(mine)
        await toggles.wait_for(True)
        released.append(blocker not in toggles)

    tasks = []
    for index in range(objects):
        mine = await toggles.make_toggle(name=f"object {index}")
        tasks.append(asyncio.create_task(worker(mine)))
        for _ in range(3):  # the next item of the list arrives; the other tasks run meanwhile
            await asyncio.sleep(0)
    if released:
        raise AssertionError("a worker passed the barrier while the listing was still going")
    await toggles.drop_toggle(blocker)
    await asyncio.gather(*tasks)
    return CountingCondition.woken, released


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", default="1000,2000,4000")
    args = parser.parse_args()
    print(f"{'objects':>8} {'woken, shipped':>15} {'s':>7} {'woken, patched':>15} {'s':>7} {'ratio':>7}")
    for objects in (int(n) for n in args.objects.split(",")):
        started = time.perf_counter()
        shipped, _ = asyncio.run(barrier(toggle_set_copy(False), objects))
        shipped_s = time.perf_counter() - started
        started = time.perf_counter()
        patched, _ = asyncio.run(barrier(toggle_set_copy(True), objects))
        patched_s = time.perf_counter() - started
        print(
            f"{objects:>8} {shipped:>15} {shipped_s:>7.2f} {patched:>15} {patched_s:>7.3f} "
            f"{patched_s / shipped_s:>6.3f}x"
        )


if __name__ == "__main__":
    main()
