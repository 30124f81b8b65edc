"""Leader election on a Lease, with a fake clock and a fake API: one holder, takeover on expiry, the fence."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

import pytest

from ascend_fleet.handlers import leader
from ascend_fleet.handlers.leader import LeaderElection, Watchdog, run_elected
from ascend_fleet.handlers.operator import OperatorContext, RunOptions
from ascend_fleet.kube import Conflict, KubeError, NotFound
from ascend_fleet.kube.lease import LeaseElector, LeaseTiming

TIMING = LeaseTiming()  # 10 s, 7 s, 1 s


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeLeases:
    """An API holding Leases with resourceVersions; ``cut`` holds the identities whose requests fail."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str | None, str], dict] = {}
        self.version = 0
        self.writes: list[str] = []  # holderIdentity of every accepted write
        self.before_replace: Callable[[], object] | None = None  # runs once, just before the next replace

    def _stored(self, body: dict) -> dict:
        self.version += 1
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        self.objects[(body["metadata"]["namespace"], body["metadata"]["name"])] = stored
        self.writes.append(body["spec"]["holderIdentity"])
        return stored

    def get(self, kind: str, namespace: str | None, name: str) -> dict:
        if (namespace, name) not in self.objects:
            raise NotFound(404, "NotFound", name)
        return self.objects[(namespace, name)]

    def create(self, obj: dict, exist_ok: bool = True) -> dict | None:
        if (obj["metadata"]["namespace"], obj["metadata"]["name"]) in self.objects:
            if exist_ok:
                return None
            raise Conflict(409, "AlreadyExists", "exists")
        return self._stored(obj)

    def replace(self, kind: str, namespace: str | None, name: str, body: dict) -> dict:
        interleaved, self.before_replace = self.before_replace, None
        if interleaved is not None:
            interleaved()
        if (
            self.objects[(namespace, name)]["metadata"]["resourceVersion"]
            != body["metadata"]["resourceVersion"]
        ):
            raise Conflict(409, "Conflict", "stale resourceVersion")
        return self._stored(body)


class CutOff:
    """One candidate's view of the API: every request fails while ``down`` (a network cut or an outage)."""

    def __init__(self, api: FakeLeases) -> None:
        self.api, self.down = api, False

    def __getattr__(self, verb: str):
        call = getattr(self.api, verb)

        def guarded(*args, **kwargs):
            if self.down:
                raise KubeError(503, "ServiceUnavailable", "unreachable")
            return call(*args, **kwargs)

        return guarded


def elector(api, identity: str, clock: Clock, timing: LeaseTiming = TIMING) -> LeaseElector:
    return LeaseElector(
        api, "ops", "ascend-fleet", identity, timing, clock=clock, wall=lambda: "2026-01-01T00:00:00.000000Z"
    )


def test_first_candidate_creates_the_lease_and_the_second_stands_by():
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.attempt() and a.leading
    assert not b.attempt() and not b.leading
    assert b.last_reason == "held by a"
    assert api.objects[("ops", "ascend-fleet")]["spec"]["leaseDurationSeconds"] == 10


def test_a_renewing_holder_keeps_the_standby_out():
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    a.attempt()
    for _ in range(60):  # a minute of renewals, each second
        clock.advance(1)
        assert a.attempt()
        assert not b.attempt()
    assert set(api.writes) == {"a"}


def test_a_standby_takes_over_only_after_seeing_the_lease_unrenewed_for_its_duration():
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    a.attempt()
    b.attempt()  # b sees a's record now
    clock.advance(9.9)
    assert not b.attempt()
    clock.advance(0.2)
    assert b.attempt() and b.leading
    spec = api.objects[("ops", "ascend-fleet")]["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert not a.attempt() and not a.leading  # the old holder, back, stands by


def test_a_standby_that_just_started_waits_a_full_duration_whatever_renewTime_says():
    api, clock = FakeLeases(), Clock()
    elector(api, "a", clock).attempt()
    clock.advance(3600)  # the record is an hour old by its writer's clock
    late = elector(api, "late", clock)
    assert not late.attempt()
    clock.advance(10.1)
    assert late.attempt()


@pytest.mark.parametrize("cut", ["holder", "everyone"])
def test_a_holder_that_cannot_renew_stops_before_anyone_may_take_over(cut):
    api, clock = FakeLeases(), Clock()
    holder_view, standby_view = CutOff(api), CutOff(api)
    a, b = elector(holder_view, "a", clock), elector(standby_view, "b", clock)
    a.attempt()
    b.attempt()
    holder_view.down = True  # a network cut of the holder; with "everyone", an API outage
    standby_view.down = cut == "everyone"
    stopped_at = taken_at = None
    for _ in range(300):  # 30 s in steps of 0.1 s
        clock.advance(0.1)
        a.attempt()
        if stopped_at is None and a.deadline_passed():
            stopped_at = clock.now
        if cut == "everyone" and clock.now > 120:
            standby_view.down = False  # the API is back after 20 s
        if taken_at is None and b.attempt():
            taken_at = clock.now
    assert stopped_at is not None and taken_at is not None
    assert stopped_at - 100 == pytest.approx(7, abs=0.11)
    assert taken_at - stopped_at >= 3 - 0.11  # the gap between the holder's deadline and the Lease's expiry
    assert not a.leading


def test_a_renewal_after_the_deadline_does_not_restore_leadership():
    api, clock = FakeLeases(), Clock()
    view = CutOff(api)
    a = elector(view, "a", clock)
    a.attempt()
    view.down = True
    clock.advance(7.5)
    a.attempt()
    view.down = False
    assert not a.attempt()  # the write may succeed, but the process has been told to stop
    assert a.deadline_passed()


def test_two_standbys_racing_for_an_expired_lease_elect_one():
    api, clock = FakeLeases(), Clock()
    elector(api, "a", clock).attempt()
    b, c = elector(api, "b", clock), elector(api, "c", clock)
    b.attempt()
    c.attempt()
    clock.advance(11)
    won: list[bool] = []
    api.before_replace = lambda: won.append(c.attempt())  # c writes between b's read and b's write
    assert not b.attempt()
    assert won == [True]
    assert b.last_reason.startswith("cannot write the lease"), b.last_reason
    assert not b.attempt()
    assert api.objects[("ops", "ascend-fleet")]["spec"]["holderIdentity"] == "c"


def test_a_released_lease_is_taken_at_the_next_attempt():
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    a.attempt()
    b.attempt()
    a.release()
    clock.advance(1)
    assert b.attempt()
    assert api.writes == ["a", "", "b"]


def test_timing_must_leave_the_holder_time_to_stop():
    with pytest.raises(ValueError):
        LeaseTiming(lease_duration=10, renew_deadline=10, retry_period=1)
    with pytest.raises(ValueError):
        LeaseTiming(lease_duration=10, renew_deadline=1, retry_period=2)


def test_the_watchdog_fires_once_the_deadline_passes():
    api, clock = FakeLeases(), Clock()
    a = elector(api, "a", clock)
    a.attempt()
    lost = threading.Event()
    watchdog = Watchdog(a, lost.set).start()
    try:
        assert not lost.wait(0.3)
        clock.advance(7)
        assert lost.wait(2)
        assert watchdog.fired.is_set()
    finally:
        watchdog.stop()


def test_run_elected_starts_the_operator_only_on_the_holder_and_hands_over_on_stop(monkeypatch):
    """Two replicas in one loop against one fake API: only one runs the operator; its stop hands over."""
    running: list[str] = []

    async def fake_operator(ctx, options, stop_flag=None, ready_flag=None):
        running.append(ctx.name)
        while not stop_flag.is_set():
            await asyncio.sleep(0.01)
        running.remove(ctx.name)

    monkeypatch.setattr(leader, "run_operator", fake_operator)
    api = FakeLeases()
    timing = LeaseTiming(lease_duration=1.0, renew_deadline=0.6, retry_period=0.05)

    async def scenario() -> None:
        stops = {name: threading.Event() for name in ("a", "b")}
        runs = {
            name: asyncio.create_task(
                run_elected(
                    # the fake operator only records which replica runs
                    cast(OperatorContext, SimpleNamespace(name=name, kube=SimpleNamespace(fence=None))),
                    RunOptions(),
                    LeaderElection("ops", "lease", name, timing),
                    stops[name],
                    api=api,
                    on_lost=pytest.fail,
                )
            )
            for name in ("a", "b")
        }
        await asyncio.sleep(0.5)
        assert len(running) == 1
        first = running[0]
        stops[first].set()
        await asyncio.wait_for(runs[first], 5)
        await asyncio.sleep(0.5)  # the release lets the other take over at its next attempt, not after 1 s
        assert running == ["b" if first == "a" else "a"]
        for stop in stops.values():
            stop.set()
        await asyncio.wait_for(asyncio.gather(*runs.values()), 5)

    asyncio.run(scenario())
    assert running == []


def test_each_process_is_a_new_candidate_named_after_its_pod():
    first, second = (leader.candidate_identity({"POD_NAME": "op-7d9f-abcde"}) for _ in range(2))
    assert first.startswith("op-7d9f-abcde_") and second.startswith("op-7d9f-abcde_")
    assert first != second


def test_run_with_a_lease_needs_its_namespace(monkeypatch, capsys):
    from ascend_fleet.cli.main import build_parser
    from ascend_fleet.cli.runtime import run_with_lease

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    args = build_parser().parse_args(["run", "--leader-elect-lease", "ascend-fleet"])
    assert run_with_lease(cast(OperatorContext, None), RunOptions(), args) == 2
    assert "--leader-elect-namespace" in capsys.readouterr().err


def test_the_fence_refuses_every_request_once_the_deadline_passed():
    from kubernetes import client

    from ascend_fleet.kube import Kube

    api, clock = FakeLeases(), Clock()
    a = elector(api, "a", clock)
    a.attempt()
    lost: list[bool] = []
    kube = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    kube.fence = leader.fence(a, lambda: lost.append(True))
    kube.fence()  # within the deadline: allowed
    clock.advance(7)
    with pytest.raises(KubeError, match="no longer holds"):
        kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}})
    assert lost == [True]


def test_a_slow_stop_keeps_the_lease_until_the_operator_has_ended(monkeypatch):
    """kopf's last passes may write while it stops: the Lease is renewed meanwhile, released only after."""
    running: list[str] = []
    stopped_at: list[float] = []

    async def slow_operator(ctx, options, stop_flag=None, ready_flag=None):
        running.append(ctx.name)
        while not stop_flag.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.5)  # longer than the Lease: without renewals a standby would take over
        running.remove(ctx.name)
        stopped_at.append(asyncio.get_running_loop().time())

    monkeypatch.setattr(leader, "run_operator", slow_operator)
    api = FakeLeases()
    timing = LeaseTiming(lease_duration=1.0, renew_deadline=0.6, retry_period=0.05)

    def replica(name: str, stop: threading.Event):
        ctx = cast(OperatorContext, SimpleNamespace(name=name, kube=SimpleNamespace(fence=None)))
        election = LeaderElection("ops", "lease", name, timing)
        return run_elected(ctx, RunOptions(), election, stop, api=api, on_lost=pytest.fail)

    async def scenario() -> None:
        stop_a, stop_b = threading.Event(), threading.Event()
        a = asyncio.create_task(replica("a", stop_a))
        await asyncio.sleep(0.3)
        b = asyncio.create_task(replica("b", stop_b))
        await asyncio.sleep(0.3)
        stop_a.set()
        overlap = False
        while not a.done():
            overlap |= running == ["a", "b"] or running == ["b", "a"]
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert not overlap
        assert running == ["b"]
        stop_b.set()
        await asyncio.wait_for(b, 5)

    asyncio.run(scenario())
    assert len(stopped_at) == 2
