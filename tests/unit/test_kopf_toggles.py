"""The operator's patch of kopf's readiness barrier: fewer wake-ups, the same moments of readiness."""

import asyncio

from bench.reconcile.barrier import barrier, toggle_set_copy

from ascend_fleet.handlers.kopf_compat import needs_wakeup, notify_on_change_only


def test_the_decision():
    assert needs_wakeup(False, True) and needs_wakeup(True, False)
    assert not needs_wakeup(False, False) and not needs_wakeup(True, True)


def test_every_worker_is_released_when_the_last_toggle_goes_and_woken_once_not_once_per_object():
    shipped_woken, shipped = asyncio.run(barrier(toggle_set_copy(False), 200))
    patched_woken, patched = asyncio.run(barrier(toggle_set_copy(True), 200))
    assert shipped == patched == [True] * 200  # all released, and only after the listing's toggle went
    assert shipped_woken > 200 * 100  # kopf as shipped: every waiter so far, per toggle made and dropped
    assert patched_woken == 200  # patched: each waiter once, when the set turned on


def test_a_waiter_on_one_toggle_still_wakes_when_it_turns():
    async def run() -> bool:
        toggles = toggle_set_copy(True)(all)
        one = await toggles.make_toggle(name="one")
        waiter = asyncio.create_task(one.wait_for(True))
        await asyncio.sleep(0)
        await toggles.make_toggle(name="another")  # no wake-up: nothing anyone waits for changed
        await one.turn_to(True)
        await asyncio.wait_for(waiter, 2)
        return one.is_on()

    assert asyncio.run(run())


def test_the_patch_is_applied_once_and_refuses_a_class_of_another_shape():
    cls = toggle_set_copy(True)
    assert notify_on_change_only(cls) and notify_on_change_only(cls)
    assert not notify_on_change_only(type("Other", (), {}))
