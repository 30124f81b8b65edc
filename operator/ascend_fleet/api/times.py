"""RFC 3339 timestamps as Kubernetes writes them (second precision, UTC, trailing Z)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> float | None:
    """Seconds since the epoch, or None for a missing or unreadable time."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rfc3339_ms(epoch: float) -> str:
    """Millisecond precision, for the operator's own timers (a drain measured in whole seconds ends early)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
