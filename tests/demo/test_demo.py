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

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.demo import view
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
    from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable, ensure_picker, envoy_binary

    control_plane_or_skip()
    try:
        ensure_picker(progress=lambda line: print(line, flush=True))
        envoy_binary()
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the data plane: {error}")
        pytest.skip(str(error))


def run_demo(tmp_path, flags: list[str], env: dict[str, str] | None = None) -> str:
    """``ascend-fleet dev`` with ``flags`` (its own kubeconfig, a 360 s budget); its output, once it exited 0."""
    argv = [sys.executable, "-m", "ascend_fleet.cli.main", "dev", *flags]
    argv += ["--kubeconfig", str(tmp_path / "kubeconfig"), "--timeout", "360"]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


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
    out = run_demo(tmp_path, flags, env=env)
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
    # The dev kit's guard stops what the demo started once the demo's process is gone (SIGTERM, then SIGKILL
    # after 5 s), and then exits itself.
    wait_for(lambda: not processes_with(marker), 15, "the demo's processes to end (none left behind)")


SPLIT = re.compile(r"^\[(\d+):(\d\d)\] .*; split fp16 (\d+)% int8 (\d+)%", re.MULTILINE)


@needs_prometheus
@pytest.mark.timeout(420)
@pytest.mark.parametrize("flags", [[], ["--real", "--routing"]], ids=["emulator", "real-routed"])
def test_the_variants_demo_shifts_traffic_to_int8_under_the_peak_and_back_after(tmp_path, flags):
    """examples/demo-variants.yaml in the demo's scenario: the peak moves the split to int8 by the rule's step,
    the lull moves it back, and status.traffic (the split line) follows both ways; with ``--real --routing``
    requests go through Envoy and the picker meanwhile, and none fails."""
    if flags:
        data_plane_or_skip()
    out = run_demo(tmp_path, [*flags, "--file", "examples/demo-variants.yaml"])
    summary = out[out.index("Summary after") :]
    to_int8 = re.findall(
        r"\[(\d+):(\d\d)\] shift_traffic on fleet: peak-to-int8 at ([0-9.]+)% .* -> fp16 (\d+)%", out
    )
    back = re.findall(
        r"\[(\d+):(\d\d)\] shift_traffic on fleet: lull-back-to-fp16 at ([0-9.]+)% .* -> fp16 (\d+)%", out
    )
    assert to_int8 and back, out[-3000:]
    # Under the peak (> 85 %) each firing moves a quarter to int8; in the lull (< 40 %) a quarter comes back.
    assert all(float(value) > 85 for *_, value, _ in to_int8)
    assert all(float(value) < 40 for *_, value, _ in back)
    assert [int(fp16) for *_, fp16 in to_int8][:2] == [25, 0]
    assert int(back[0][3]) == 25
    first_back = int(back[0][0]) * 60 + int(back[0][1])
    assert first_back > max(int(m) * 60 + int(s) for m, s, *_ in to_int8)
    # status.traffic as the operator wrote it: int8 ahead during the peak, fp16 back up after the lull began.
    splits = [(int(m) * 60 + int(s), int(fp16), int(int8)) for m, s, fp16, int8 in SPLIT.findall(out)]
    assert all(fp16 + int8 == 100 for _, fp16, int8 in splits)
    assert any(int8 == 100 for at, _, int8 in splits if at < first_back), splits
    assert any(fp16 >= 25 for at, fp16, _ in splits if at > first_back), splits
    assert "story: complete" in summary and "shift_traffic" in summary
    assert re.search(r"shift_traffic\s+\d+:\d\d\s+\(lull-back-to-fp16\)", summary), summary
    if flags:
        routed = re.findall(r"routed short ([0-9.]+)/s", out)
        assert routed and sum(float(rate) > 0 for rate in routed) >= len(routed) / 2, out[-3000:]
        assert not re.search(r"routed [^\n]*\d+ failed", out), out[-3000:]


def test_packaged_demo_is_the_example():
    from ascend_fleet_dev.demo.runner import DEMO_FILE

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


def test_with_shift_rules_the_story_needs_each_of_them_to_act():
    three = [decision("scale_up"), decision("restart_service"), decision("scale_down")]
    rules = ("peak-to-int8", "lull-back-to-fp16")
    there = view.Decision(21, "shift_traffic", "peak-to-int8", "fleet", 0.9, "fp16 25%, int8 75%")
    back = view.Decision(93, "shift_traffic", "lull-back-to-fp16", "fleet", 0.2, "fp16 50%, int8 50%")
    assert view.story_complete(three)
    assert not view.story_complete(three, rules)
    assert not view.story_complete([*three, there], rules)
    assert view.story_complete([*three, there, back], rules)
    text = "\n".join(view.summary([*three, there], 100, 1.0, None, rules))
    assert "shift_traffic   0:21  (peak-to-int8)" in text
    assert "shift_traffic   never  (lull-back-to-fp16)" in text and "INCOMPLETE" in text


def test_the_status_line_shows_the_split_of_status_traffic():
    frame = view.Frame(
        elapsed=31, name="q", desired=2, ready=2, conditions={}, split={"fp16": 25, "int8": 75}
    )
    assert "; split fp16 25% int8 75%" in view.status_line(frame)
    assert "split" not in view.status_line(
        view.Frame(elapsed=31, name="q", desired=2, ready=2, conditions={})
    )


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
