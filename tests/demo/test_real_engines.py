"""`ascend-fleet dev --real --engines vllm` before any engine starts: the fleet fitted to the real engines that
may run at once, and the refusals that say what would fit."""

from __future__ import annotations

import io

import pytest
import yaml

from ascend_fleet.cli.main import main as cli
from ascend_fleet_dev.demo.realengines import TooFewEngines, fit_story
from ascend_fleet_dev.demo.runner import DEMO_FILE, EXIT_SETUP, DemoOptions, run_demo
from ascend_fleet_dev.fleet.scenario import Scenario


def demo() -> dict:
    return yaml.safe_load(DEMO_FILE.read_text())


def test_two_real_engines_shorten_the_story_to_one_and_two_replicas():
    doc = demo()
    assert (doc["spec"]["parallelism"]["data"], doc["spec"]["autoscaling"]["maxReplicas"]) == (2, 4)
    fitted, note = fit_story(doc, 2)
    assert fitted["spec"]["parallelism"]["data"] == 1
    assert (fitted["spec"]["autoscaling"]["minReplicas"], fitted["spec"]["autoscaling"]["maxReplicas"]) == (
        1,
        2,
    )
    assert fitted["spec"]["rules"] == doc["spec"]["rules"]  # the story's rules and windows stay as written
    assert note is not None and "runs 1 to 2 replicas instead of 2 to 4" in note
    assert doc["spec"]["parallelism"]["data"] == 2  # the caller's document is left alone


def test_enough_real_engines_leave_the_fleet_as_it_is():
    doc = demo()
    assert fit_story(doc, 4) == (doc, None)


def test_one_real_engine_cannot_tell_a_scale_up():
    with pytest.raises(TooFewEngines, match="--max-real-engines 2, not 1"):
        fit_story(demo(), 1)


def test_the_demo_refuses_real_engines_it_cannot_run(capsys):
    out = io.StringIO()
    assert run_demo(DemoOptions(real=True, engines="vllm", max_real_engines=1, out=out)) == EXIT_SETUP
    assert "at least 2 real engines" in capsys.readouterr().err and out.getvalue() == ""
    assert cli(["dev", "--engines", "vllm"]) == EXIT_SETUP
    assert "--engines vllm runs on the real control plane only (add --real)" in capsys.readouterr().err


def test_the_real_engines_scenario_leaves_room_for_engine_starts():
    """One replica is pushed over the scale-up line, two are not; the lull is under the scale-down line even
    on one replica; replica 1 leaks past the restart line only after a real engine has had time to start."""
    scenario = Scenario.demo(real_engines=True)
    scenario.start(0.0)

    def utilization(t: float, ready: int) -> float:
        return scenario.sample(t, "default", "qwen-demo", 0, 0.0, ready).utilization

    assert utilization(5, 1) < 0.6 and utilization(30, 1) > 0.85 and 0.3 < utilization(100, 2) < 0.85
    assert utilization(260, 2) > 0.3 and utilization(280, 1) < 0.3 and utilization(280, 2) < 0.3
    fragmentation = [scenario.sample(1000.0, "default", "qwen-demo", 1, 1000.0 - age, 2).fragmentation
                     for age in (180.0, 240.0)]  # fmt: skip
    assert fragmentation[0] < 0.15 < fragmentation[1]
    assert scenario.sample(1000.0, "default", "qwen-demo", 0, 700.0, 2).fragmentation < 0.15
