"""The /metrics endpoint served from several engine processes of one pod, scraped over HTTP.

Each stand-in engine process (one per tensor-parallel rank) uses one device; whichever binds the
port serves all of them. Killing processes, the server first, must lose no live device and count
none twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.local.process import guarded_popen
from ascend_fleet_exporter import metrics

from .scrape import by_device, parse, scrape
from .support import DATA, HERE, child_env, free_port, install_fake_npu_smi, port_free

INTERVAL = "0.2"
STATS = {0: "fragmented", 1: "healthy", 2: "fragmented"}
AICORE_BY_CARD = {0: 10, 1: 55, 2: 90, 3: 0}
TAKEOVER_SECONDS = 4.0


class Pod:
    """Engine processes sharing a port, a spool directory and a fake npu-smi, like one pod's container."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.env = child_env(
            {
                "ASCEND_FLEET_EXPORTER_PORT": str(self.port),
                "ASCEND_FLEET_EXPORTER_INTERVAL": INTERVAL,
                "ASCEND_FLEET_EXPORTER_DIR": str(tmp_path / "spool"),
            },
            npu_smi_dir=install_fake_npu_smi(tmp_path, AICORE_BY_CARD).parent,
        )
        self.ranks: dict[int, subprocess.Popen] = {}

    def start(self, device: int, visible: str | None = None) -> None:
        """A rank using ``device``; with ``visible``, it sees only that container device, as its 0."""
        stats = DATA / f"memory_stats_{STATS[device]}.json"
        command = [sys.executable, str(HERE / "engine_stub.py"), str(device), str(stats)]
        env = dict(self.env)
        if visible is not None:
            command = [*command[:2], "0", str(stats), "1"]
            env["ASCEND_RT_VISIBLE_DEVICES"] = visible
        process = guarded_popen(command, env=env, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline().strip() == "started"
        self.ranks[device] = process

    def kill(self, device: int) -> None:
        process = self.ranks.pop(device)
        process.send_signal(signal.SIGKILL)  # no clean shutdown: its record stays behind
        process.wait()

    def stop(self) -> None:
        for device in list(self.ranks):
            self.kill(device)

    def series(self) -> dict:
        body, content_type = scrape(self.port)
        assert content_type == metrics.CONTENT_TYPE
        return parse(body)

    def devices_shown(self, expected: set[str]) -> dict | None:
        """The scraped series once fragmentation and utilization show exactly ``expected`` devices."""
        series = self.series()
        shown = (
            set(by_device(series, metrics.MEMORY_FRAGMENTATION_RATIO)),
            set(by_device(series, metrics.NPU_UTILIZATION_RATIO)),
        )
        return series if shown == (expected, expected) else None


@pytest.fixture
def pod(tmp_path):
    pod = Pod(tmp_path)
    yield pod
    pod.stop()


def expected_fragmentation(device: int) -> float:
    stats = json.loads((DATA / f"memory_stats_{STATS[device]}.json").read_text())
    return stats["inactive_split_bytes.all.current"] / stats["reserved_bytes.all.current"]


def test_one_endpoint_serves_every_rank_once_and_survives_the_server_dying(pod):
    pod.start(0)
    wait_for(lambda: pod.devices_shown({"0"}))  # rank 0 took the port
    pod.start(1)
    pod.start(2)
    series = wait_for(lambda: pod.devices_shown({"0", "1", "2"}))

    assert by_device(series, metrics.MEMORY_FRAGMENTATION_RATIO) == {
        str(d): pytest.approx(expected_fragmentation(d)) for d in (0, 1, 2)
    }
    # Device n is card n of the 910B chip map: each rank shows its own card's utilization.
    assert by_device(series, metrics.NPU_UTILIZATION_RATIO) == {"0": 0.1, "1": 0.55, "2": 0.9}
    assert by_device(series, metrics.HBM_TOTAL_BYTES) == {str(d): 64 * 1024**3 for d in (0, 1, 2)}
    # The per-core-type lines this 910B npu-smi prints; it prints no Aicube line, so that family is absent.
    assert by_device(series, metrics.NPU_AIVECTOR_UTILIZATION_RATIO) == {str(d): 0.41 for d in (0, 1, 2)}
    assert by_device(series, metrics.HBM_BANDWIDTH_UTILIZATION_RATIO) == {str(d): 0.35 for d in (0, 1, 2)}
    assert metrics.NPU_AICUBE_UTILIZATION_RATIO not in series
    assert by_device(series, metrics.ALLOC_RETRIES_TOTAL) == {"0": 12, "1": 0, "2": 12}
    assert by_device(series, metrics.OOMS_TOTAL) == {"0": 1, "1": 0, "2": 1}
    assert series[metrics.EXPORTER_SCRAPE_ERRORS_TOTAL] == {
        (("collector", "npu_smi"),): 0.0,
        (("collector", "torch_npu"),): 0.0,
    }

    # Well within the 10 s after which a record counts as stale: dead ranks are dropped by their pid.
    pod.kill(0)  # the server: a surviving rank takes the port over, and device 0 is gone
    wait_for(lambda: pod.devices_shown({"1", "2"}), timeout=TAKEOVER_SECONDS)
    pod.kill(1)
    series = wait_for(lambda: pod.devices_shown({"2"}), timeout=TAKEOVER_SECONDS)
    assert by_device(series, metrics.ALLOC_RETRIES_TOTAL) == {"2": 12}

    pod.kill(2)
    wait_for(lambda: port_free(pod.port))


def test_ranks_that_each_see_one_npu_report_the_container_device_ids(pod):
    # Ray narrows ASCEND_RT_VISIBLE_DEVICES per worker unless told not to: each rank calls its NPU 0.
    pod.start(1, visible="1")
    pod.start(2, visible="2")
    series = wait_for(lambda: pod.devices_shown({"1", "2"}))
    assert by_device(series, metrics.NPU_UTILIZATION_RATIO) == {"1": 0.55, "2": 0.9}
    assert by_device(series, metrics.MEMORY_FRAGMENTATION_RATIO) == {
        str(d): pytest.approx(expected_fragmentation(d)) for d in (1, 2)
    }


def test_index_and_unknown_paths(pod):
    pod.start(1)
    body, _ = wait_for(lambda: scrape(pod.port, "/"))
    assert "/metrics" in body
    with pytest.raises(OSError, match="404"):
        scrape(pod.port, "/nope")
