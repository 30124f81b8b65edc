"""What /proc says of a process: whether it is gone, running, or a zombie nobody reaped."""

from __future__ import annotations

from pathlib import Path


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc (``Z``: a zombie), None when no such process is left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]
