"""A stand-in engine process for the exporter tests: it uses one device, with recorded allocator stats.

Run as ``python engine_stub.py <device> <memory_stats.json> [<visible device count>]`` with the
exporter's environment set; it starts the exporter the way an engine hook would once the device is
bound, then waits.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ascend_fleet_exporter.config import ExporterConfig
from ascend_fleet_exporter.runtime import start_exporter


class RecordedStats:
    """Allocator statistics of a process that uses ``device`` out of ``count`` visible ones."""

    def __init__(self, device: int, stats: Mapping[str, Any], count: int = 4) -> None:
        self.device, self.stats, self.count = device, stats, count

    def device_count(self) -> int:
        return self.count

    def memory_stats(self, device: int) -> Mapping[str, Any]:
        return self.stats if device == self.device else {key: 0 for key in self.stats}


def main() -> None:
    device, stats_file = int(sys.argv[1]), Path(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    stats = RecordedStats(device, json.loads(stats_file.read_text()), count)
    start_exporter(ExporterConfig.from_env(), stats=stats)
    print("started", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
