"""Durations, thresholds and steps as users write them: ``30s``, ``5m``, ``5min``, ``1h``; ``0.85``, ``"85%"``
or, for a latency, ``1s`` and ``500ms``; a step of ``25`` or ``"25%"``."""

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
# A rule's threshold may also be a duration (seconds, for a latency metric): ``1s``, ``500ms``.
RULE_THRESHOLD_PATTERN = THRESHOLD_PATTERN[:-2] + "|" + DURATION_PATTERN[1:-1] + ")$"
# A step as a percentage above zero and at most 100 (a whole number is the int branch of the field).
STEP_PATTERN = r"^(100(\.0+)?|[1-9][0-9]?(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)%$"

_THRESHOLD = re.compile(THRESHOLD_PATTERN)
_DURATION = re.compile(DURATION_PATTERN)
_STEP = re.compile(STEP_PATTERN)


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


def is_duration_text(value: object) -> bool:
    """Whether ``value`` is a duration written with a unit (``1s``, ``500ms``), not a plain number."""
    return isinstance(value, str) and bool(_DURATION.match(value))


def is_percent_text(value: object) -> bool:
    return isinstance(value, str) and value.endswith("%")


def parse_rule_threshold(value: object) -> float:
    """A rule's threshold: what :func:`parse_threshold` reads, or a duration in seconds (``500ms`` -> 0.5)."""
    if is_duration_text(value):
        return parse_duration(value)
    try:
        return parse_threshold(value)
    except ValueError as error:
        if "not a threshold" in str(error):
            raise ValueError(
                f"{value!r} is not a threshold; write a number such as 0.85, a percentage such as '85%', "
                "or for a latency metric a duration such as 1s or 500ms"
            ) from None
        raise


def format_seconds(value: float) -> str:
    """A latency as users write it: ``500ms`` below a second, else as :func:`format_duration` does."""
    if 0 < value < 1 and abs(value * 1000 - round(value * 1000)) < 1e-9:
        return f"{round(value * 1000)}ms"
    return format_duration(value)


def parse_step(value: object) -> int:
    """A step in whole percents: ``25`` or ``"25%"``; a fractional percentage rounds up (``"12.5%"`` -> 13),
    as the HorizontalPodAutoscaler rounds a Percent policy's change up, so that a step never rounds to nothing."""
    sentence = f"{value!r} is not a step; write a whole number from 1 to 100 or a percentage such as '25%'"
    if isinstance(value, bool):
        raise ValueError(sentence)
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _STEP.match(value):
        number = math.ceil(float(value[:-1]))
    else:
        raise ValueError(sentence)
    if not 1 <= number <= 100:
        raise ValueError(sentence)
    return number
