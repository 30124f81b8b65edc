"""`ascend-fleet dev` end to end, non-interactively, as CI and a newcomer run it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ascend_fleet.demo import view
from tests.support.paths import ROOT
from tests.support.realcluster import control_plane_or_skip

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None and not os.environ.get("CI"),
    reason="needs the prometheus binary (apt-get install prometheus); CI installs it",
)


def processes_with(marker: str) -> list[int]:
    """PIDs whose environment carries ``marker`` (children inherit it, wherever they are reparented)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def data_plane_or_skip() -> None:
    """Skip (fail under CI) where the control plane or the endpoint picker cannot be built here."""
    from ascend_fleet.devcluster.real.dataplane import DataPlaneUnavailable, ensure_picker, envoy_binary

    control_plane_or_skip()
    try:
        ensure_picker(progress=lambda line: print(line, flush=True))
        envoy_binary()
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the data plane: {error}")
        pytest.skip(str(error))


@needs_prometheus
@pytest.mark.timeout(420)
@pytest.mark.parametrize("flags", [[], ["--real", "--routing"]], ids=["emulator", "real-routed"])
def test_demo_tells_the_whole_story_and_leaves_nothing_behind(tmp_path, flags):
    """The demo's story; with ``--real --routing`` the fleet also serves requests through the upstream endpoint
    picker (the operator's picker pod) and the view shows them per class."""
    if flags:
        data_plane_or_skip()
    marker = f"ASCEND_FLEET_DEMO_RUN={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ascend_fleet.cli.main",
            "dev",
            *flags,
            "--kubeconfig",
            str(tmp_path / "kubeconfig"),
            "--timeout",
            "360",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=400,
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    summary = out[out.index("Summary after") :]
    for action, rule in [
        ("scale_up", "npu_utilization > 85% for 12s -> scale_up"),
        ("restart_service", "mem_fragmentation > 15% for 8s -> restart_service"),
        ("scale_down", "npu_utilization < 30% for 12s -> scale_down"),
    ]:
        assert re.search(rf"{action}\s+\d+:\d\d\s+\({re.escape(rule)}\)", summary), summary
    assert re.search(r"restart_service on replica-\d: mem_fragmentation", summary)
    assert "story: complete" in summary
    assert "replicas 2 -> 3" in summary
    routed = re.findall(r"routed short ([0-9.]+)/s ([0-9.]+%|-) >1s", out)
    if "--routing" in flags:
        # Requests answered through Envoy and the picker in most lines; never a failure the client saw.
        assert sum(float(rate) > 0 for rate, _ in routed) >= len(routed) / 2 > 0, out[-3000:]
        assert not re.search(r"routed [^\n]*\d+ failed", out), out[-3000:]
    else:
        assert routed == []
    assert processes_with(marker) == [], "the demo left processes behind"


def test_packaged_demo_is_the_example():
    from ascend_fleet.demo.runner import DEMO_FILE

    assert DEMO_FILE.read_text() == (ROOT / "examples" / "demo.yaml").read_text()


def test_demo_without_prometheus_says_how_to_install_it(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "ASCEND_FLEET_PROMETHEUS": ""}
    result = subprocess.run(
        [sys.executable, "-m", "ascend_fleet.cli.main", "dev"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert "apt-get install prometheus" in result.stderr
    assert "Traceback" not in result.stderr


def decision(action, at=10.0, dry=False):
    return view.Decision(at, action, f"rule for {action}", "fleet", 0.9, "done", dry)


def test_story_needs_all_three_actions_for_real():
    assert not view.story_complete([decision("scale_up"), decision("restart_service")])
    assert not view.story_complete(
        [decision("scale_up"), decision("restart_service"), decision("scale_down", dry=True)]
    )
    assert view.story_complete([decision("scale_up"), decision("restart_service"), decision("scale_down")])


def test_summary_reports_time_to_each_action_and_npu_minutes():
    lines = view.summary(
        [decision("scale_up", 27), decision("restart_service", 43), decision("scale_down", 99)],
        106,
        22.44,
        None,
    )
    text = "\n".join(lines)
    assert "Summary after 1m46s" in text
    assert "scale_up        0:27  (rule for scale_up)" in text
    assert "scale_down      1:39" in text
    assert "NPU-minutes used: 22.4" in text
    assert "story: complete" in text
    assert "restart_service never" not in text
    incomplete = "\n".join(view.summary([decision("scale_up", 5)], 300, 1.0, None))
    assert "scale_down      never" in incomplete and "INCOMPLETE" in incomplete


def test_live_frame_shows_replicas_and_rule_progress():
    snapshot = view.Frame(
        elapsed=75,
        name="qwen",
        desired=3,
        ready=2,
        conditions={"Ready": "False(ReplicasNotReady)"},
        rows=[
            view.ReplicaRow(0, 1, 1, 0.91, 0.02, 4),
            view.ReplicaRow(1, 1, 0, None, None, None, draining=True),
        ],
        rules=[view.RuleProgress("npu_utilization > 85% for 12s -> scale_up", 6, 12, 0.91)],
        npu_minutes=3.25,
    )
    lines = view.frame(snapshot)
    assert lines[0].startswith("ascend-fleet dev  1:15   qwen: 2/3 replicas ready")
    assert any(line.startswith("0") and "91.0%" in line and "serving" in line for line in lines)
    assert any(line.startswith("1") and "draining" in line for line in lines)
    assert any("[######......]    6/12s  npu_utilization > 85%" in line for line in lines)
