"""Durations and thresholds as users write them: ``30s``, ``5m``, ``5min``, ``1h``; ``0.85`` or ``"85%"``."""

from __future__ import annotations

import math
import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|min|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
# The same grammar for the CRD's OpenAPI pattern, so kubectl rejects what pydantic would.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|min|s|m|h))+$"
# A threshold written as a string: a plain number, or a percentage from 0% to 100% (so the CRD can refuse
# "150%" without arithmetic); pydantic accepts exactly the strings this pattern does.
THRESHOLD_PATTERN = r"^([0-9]+(\.[0-9]+)?|(100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)%)$"


_THRESHOLD = re.compile(THRESHOLD_PATTERN)


def parse_duration(value: object) -> float:
    """Return seconds for ``30s``, ``5m``, ``5min``, ``1h30m`` or a bare number of seconds.

    Raises ValueError with a message that shows the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write e.g. 30s, 5m, 5min or 1h")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if text and _DURATION_PART.sub("", text) == "":
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))
        else:
            raise ValueError(f"{value!r} is not a duration; write e.g. 30s, 5m, 5min or 1h")
    else:
        raise ValueError(f"{value!r} is not a duration; write e.g. 30s, 5m, 5min or 1h")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} is not a duration; it must be zero or more, e.g. 30s or 5m")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest of ``1h``, ``5m``, ``30s`` (or a mix such as ``1m30s``) for a number of seconds."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"


def parse_threshold(value: object) -> float:
    """Return a plain number for ``0.85``, ``12`` or ``"85%"`` (a percentage becomes a ratio, 0.85)."""
    if isinstance(value, bool):
        raise ValueError(
            f"{value!r} is not a threshold; write a number such as 0.85 or a percentage such as '85%'"
        )
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        text = value
        if text.endswith("%") and re.fullmatch(r"[0-9]+(\.[0-9]+)?%", text) and not _THRESHOLD.match(text):
            raise ValueError(f"{value!r} is out of range; a percentage is between 0% and 100%")
        if not _THRESHOLD.match(text):
            raise ValueError(
                f"{value!r} is not a threshold; write a number such as 0.85 or a percentage such as '85%'"
            )
        number = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    else:
        raise ValueError(
            f"{value!r} is not a threshold; write a number such as 0.85 or a percentage such as '85%'"
        )
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{value!r} is out of range; a threshold is zero or more")
    return number


def format_threshold(value: float) -> str:
    """Human form of a threshold: ratios as percentages (``85%``), other numbers as they are.

    Zero is shown as ``0``: it is as much a count (``npu_unhealthy > 0``) as a ratio.
    """
    if 0.0 < value <= 1.0:
        return f"{value * 100:g}%"
    return f"{value:g}"
