"""Polling with one deadline rule: ``wait_for`` and the one time-scale setting that stretches deadlines.

A loaded machine (a shared 2-core CI runner) starts processes and answers requests more slowly than a
developer's laptop. Rather than raising deadlines one by one, every wait in the tests and every start-up
deadline of a local program is multiplied by ``ASCEND_FLEET_TEST_TIME_SCALE`` (default 1; set 2 or 3
on a loaded machine). Intervals are not scaled: a wait polls as often, it only gives up later.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

TIME_SCALE_VARIABLE = "ASCEND_FLEET_TEST_TIME_SCALE"
_T = TypeVar("_T")


def time_scale() -> float:
    """The factor from ``ASCEND_FLEET_TEST_TIME_SCALE`` (1 when unset); ValueError unless a positive number."""
    text = os.environ.get(TIME_SCALE_VARIABLE, "").strip()
    if not text:
        return 1.0
    try:
        scale = float(text)
    except ValueError:
        raise ValueError(f"{TIME_SCALE_VARIABLE}={text!r} is not a number") from None
    if not scale > 0:
        raise ValueError(f"{TIME_SCALE_VARIABLE}={text!r} must be positive")
    return scale


def scaled(seconds: float) -> float:
    """A deadline of ``seconds`` on an unloaded machine, stretched by the time-scale setting."""
    return seconds * time_scale()


class WaitTimeout(AssertionError):
    """A condition did not hold in time; carries the last value the condition returned."""

    def __init__(self, message: str, last: object):
        super().__init__(message)
        self.last = last


def wait_for(
    condition: Callable[[], _T],
    timeout: float = 10.0,
    what: str = "the condition",
    interval: float = 0.05,
) -> _T:
    """Poll ``condition`` until it returns something truthy, and return that value.

    ``timeout`` is scaled by :func:`scaled`. An exception from ``condition`` counts as "not yet"; on
    timeout, :class:`WaitTimeout` (an AssertionError) names ``what``, the last value seen, and chains
    the last exception.
    """
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    last: object = None
    last_error: Exception | None = None
    while True:
        try:
            result = condition()
            last, last_error = result, None
            if result:
                return result
        except Exception as error:  # the condition may fail while the thing it polls is starting
            last_error = error
        if time.monotonic() >= deadline:
            seen = f"last error: {last_error!r}" if last_error is not None else f"last value: {last!r}"
            raise WaitTimeout(
                f"timed out after {limit:g} s waiting for {what} ({seen})", last
            ) from last_error
        time.sleep(interval)
