"""What a benchmark's log records of the machine it ran on: when, how many cores, how busy."""

from __future__ import annotations

import os
import time


def machine_load() -> str:
    """One comment line for a log: the UTC time, the cores, and the 1, 5 and 15 minute load averages."""
    one, five, fifteen = os.getloadavg()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"# {stamp}, {os.cpu_count()} cores, load average {one:.2f} {five:.2f} {fifteen:.2f}"
