"""``ascend-fleet simulate`` (through its register hook) and ``python -m bench.policy``."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys

import pytest

from ascend_fleet.simulate.cli import register
from ascend_fleet.simulate.run import POLICIES
from ascend_fleet.simulate.traces import BUILT_IN
from tests.support.paths import ROOT


def simulate(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="ascend-fleet")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["simulate", *argv])
    return args.handler(args)


def test_simulate_prints_every_policy_side_by_side(capsys):
    assert simulate("--trace", "steady", "--hours", "0.2", "--seed", "2") == 0
    out = capsys.readouterr().out
    assert "trace steady:" in out and "seed 2" in out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["static-3", *POLICIES[1:]]
    assert out.count("rules ") >= 3  # a verdict line against each other policy


def test_one_policy_with_a_static_size(capsys):
    assert simulate("--policy", "static", "--replicas", "2", "--hours", "0.1") == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 and rows[1].startswith("| static-2 ")


def test_a_csv_trace_and_a_bad_spec(tmp_path, capsys):
    trace = tmp_path / "mine.csv"
    trace.write_text("".join(f"{i * 0.5},512,50\n" for i in range(100)))
    assert simulate("--trace", str(trace), "--policy", "hpa", "--hours", "0.1") == 0
    assert "trace mine: 100 requests" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: AscendInference\nspec: {parallelism: {tensor: 3}}\n")
    assert simulate("--spec", str(bad), "--hours", "0.1") == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is optional")
def test_png_is_written(tmp_path, capsys):
    path = tmp_path / "out.png"
    assert simulate("--policy", "hpa", "--hours", "0.1", "--png", str(path)) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_png_is_skipped_with_a_message(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" fail
    path = tmp_path / "out.png"
    assert simulate("--policy", "hpa", "--hours", "0.1", "--png", str(path)) == 0
    assert not path.exists()
    assert "pip install matplotlib" in capsys.readouterr().err


def test_bench_policy_prints_a_table_per_trace_and_a_verdict():
    run = subprocess.run(
        [sys.executable, "-m", "bench.policy", "--hours", "0.1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    for name in BUILT_IN:
        assert f"## {name}:" in run.stdout
    assert run.stdout.count("| policy ") == len(BUILT_IN)
    assert "Rules win" in run.stdout and "Rules lose" in run.stdout
