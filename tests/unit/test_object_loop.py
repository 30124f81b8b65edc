"""The per-object loop's timing, with a fake clock: error backoff, settle after writes, the status hold."""

import asyncio
import logging

from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.kube import KubeError
from ascend_fleet.reconcile.apply import PassResult
from ascend_fleet.reconcile.expectations import CREATE, Expectation, Expectations
from ascend_fleet.reconcile.object_loop import ObjectLoop
from ascend_fleet.reconcile.timing import ERROR_BACKOFF, STATUS_HOLD_SECONDS, WATCH_SETTLE_SECONDS

NOW = 1_000_000.0
UID = "uid-a"


class FakeClock:
    """Time moves only when the loop waits; every wait is recorded as (seconds, settle)."""

    def __init__(self) -> None:
        self.time = NOW
        self.waits: list[tuple[float, float]] = []

    def now(self) -> float:
        return self.time

    async def wait(self, should_stop, wake, seconds: float, settle: float) -> None:
        self.waits.append((seconds, settle))
        self.time += seconds


def body() -> dict:
    return {
        "metadata": {"name": "a", "namespace": "ns", "uid": UID, "generation": 1, "resourceVersion": "1"},
        "spec": {},
    }


def pod(name: str) -> dict:
    return {"metadata": {"name": name, "ownerReferences": [{"uid": UID, "controller": True}]}}


def make_loop(passes, children=None, expectations=None) -> tuple[ObjectLoop, FakeClock, list]:
    clock, calls = FakeClock(), []

    def reconcile_pass(kube, snapshot, observed, settings, now, outcome, hold_until):
        calls.append((now, hold_until))
        return passes[len(calls) - 1](outcome)

    loop = ObjectLoop(
        kube=None,  # type: ignore[arg-type]  # the pass is replaced: no request is made
        settings=OperatorSettings(),
        expectations=expectations or Expectations(),
        namespace="ns",
        name="a",
        uid=UID,
        read_object=body,
        read_children=lambda: (children or [], [], []),
        logger=logging.getLogger("test"),
        clock=clock,
        reconcile_pass=reconcile_pass,
    )
    return loop, clock, calls


def run(loop: ObjectLoop, turns: int) -> None:
    async def main() -> None:
        wake = asyncio.Event()
        for _ in range(turns):
            await loop.step(lambda: False, wake)

    asyncio.run(main())


def failing(outcome):
    raise KubeError(503, "ServiceUnavailable", "the API is down")


def converged(outcome):
    return PassResult(requeue_after=None, wrote=False)


def test_api_errors_back_off_doubling_to_the_cap_and_a_good_pass_resets_it():
    loop, clock, calls = make_loop([failing] * 7 + [converged])
    run(loop, 8)
    delays = [seconds for seconds, _ in clock.waits[:7]]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert all(settle == seconds for seconds, settle in clock.waits[:7])  # wake-ups do not cut a backoff
    assert loop.error_delay == ERROR_BACKOFF[0]
    resync = OperatorSettings().reconcile.resync_interval
    assert clock.waits[7] == (resync, 0.0)  # converged: nothing to settle, wait for a change or the resync
    assert [now for now, _ in calls] == [NOW + sum(delays[:i]) for i in range(8)]  # each pass sees the clock


def test_after_creates_the_status_is_held_and_the_next_wait_settles_first():
    def creates(outcome):
        outcome.created.append({"kind": "Pod", "metadata": {"name": "a-0-0"}})
        return PassResult(requeue_after=1.0, wrote=True)

    loop, clock, calls = make_loop([creates, converged])
    run(loop, 2)
    assert clock.waits[0] == (1.0, WATCH_SETTLE_SECONDS)
    assert calls[0][1] is None  # nothing held before the first creates
    assert calls[1] == (NOW + 1.0, NOW + STATUS_HOLD_SECONDS)  # the second pass holds the starting status


def test_while_an_earlier_create_is_not_in_the_cache_no_pass_runs():
    expectations = Expectations()
    expectations.expect(("ns", "a"), [Expectation(CREATE, "Pod", "a-0-0", NOW)])
    loop, clock, calls = make_loop([converged], expectations=expectations)
    run(loop, 1)
    assert calls == [] and len(clock.waits) == 1
    loop.read_children = lambda: ([pod("a-0-0")], [], [])  # the watch delivered it
    run(loop, 1)
    assert len(calls) == 1


def test_each_pass_sees_the_dead_nodes_as_they_are_when_it_starts():
    seen, dead = [], [frozenset(), frozenset({"node-2"})]
    loop, _, _ = make_loop([converged, converged])

    def reconcile_pass(kube, snapshot, observed, settings, now, outcome, hold_until):
        seen.append(observed.dead_nodes)
        return converged(outcome)

    loop.reconcile_pass = reconcile_pass
    loop.read_dead_nodes = lambda: dead[len(seen)]
    run(loop, 2)
    assert seen == [frozenset(), frozenset({"node-2"})]
