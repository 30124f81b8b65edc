"""wait_for: the first truthy value, a timeout that names what it waited for, one time-scale setting."""

from __future__ import annotations

import time

import pytest

from ascend_fleet.kube import WaitTimeout, scaled, time_scale, wait_for
from ascend_fleet.kube.wait import TIME_SCALE_VARIABLE


def test_it_returns_the_first_truthy_value(monkeypatch):
    monkeypatch.delenv(TIME_SCALE_VARIABLE, raising=False)
    answers = iter([None, 0, [], ["pod-0"], ["pod-0", "pod-1"]])
    assert wait_for(lambda: next(answers), timeout=5, interval=0) == ["pod-0"]


def test_an_exception_is_not_yet(monkeypatch):
    monkeypatch.delenv(TIME_SCALE_VARIABLE, raising=False)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("starting")
        return "up"

    assert wait_for(flaky, timeout=5, interval=0) == "up"


def test_a_timeout_names_what_and_the_last_value(monkeypatch):
    monkeypatch.delenv(TIME_SCALE_VARIABLE, raising=False)
    with pytest.raises(WaitTimeout) as timed_out:
        wait_for(lambda: {}, timeout=0.1, what="qwen to have 3 ready replicas", interval=0.01)
    message = str(timed_out.value)
    assert message == "timed out after 0.1 s waiting for qwen to have 3 ready replicas (last value: {})"
    assert timed_out.value.last == {}
    assert isinstance(timed_out.value, AssertionError)  # pytest reports it as a failed check


def test_a_timeout_chains_the_last_error(monkeypatch):
    monkeypatch.delenv(TIME_SCALE_VARIABLE, raising=False)

    def refused() -> None:
        raise ConnectionRefusedError("port 9090")

    with pytest.raises(WaitTimeout, match=r"last error: ConnectionRefusedError\('port 9090'\)") as timed_out:
        wait_for(refused, timeout=0.05, what="Prometheus", interval=0.01)
    assert isinstance(timed_out.value.__cause__, ConnectionRefusedError)


def test_the_time_scale_stretches_every_timeout(monkeypatch):
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "3")
    assert time_scale() == 3.0 and scaled(120) == 360.0
    began = time.monotonic()
    with pytest.raises(WaitTimeout, match="timed out after 0.3 s waiting for never"):
        wait_for(lambda: False, timeout=0.1, what="never", interval=0.01)
    assert time.monotonic() - began >= 0.3


@pytest.mark.parametrize("text, scale", [("", 1.0), ("1", 1.0), ("2.5", 2.5), (" 2 ", 2.0)])
def test_the_time_scale_is_read_from_one_variable(monkeypatch, text, scale):
    monkeypatch.setenv(TIME_SCALE_VARIABLE, text)
    assert time_scale() == scale


@pytest.mark.parametrize("text", ["fast", "0", "-1"])
def test_a_time_scale_that_is_not_a_positive_number_is_refused(monkeypatch, text):
    monkeypatch.setenv(TIME_SCALE_VARIABLE, text)
    with pytest.raises(ValueError, match=TIME_SCALE_VARIABLE):
        time_scale()
