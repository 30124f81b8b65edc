"""bench/reconcile --save and --table: runs of each backend saved on their own, printed side by side."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def saved(path: Path, backend: str, objects: int, writes: int) -> Path:
    run = {
        "backend": backend,
        "objects": objects,
        "converged": 12.5,
        "counts": {"POST pods": objects, "PATCH ascendinferences/status": writes - objects, "WATCH pods": 3},
        "idle_counts": {},
        "idle_seconds": 30.0,
        "rss_before": 60.0,
        "rss_after": 70.0,
        "peak": 71.0,
        "statuses": {
            "changes": objects,
            "repeats": 0,
            "conflicts": 0,
            "children_written_twice": 0,
            "sequences": [["1/1 AllReplicasReady/Converged", objects]],
            "children_twice_examples": [],
        },
    }
    path.write_text(json.dumps({"objects": objects, "replicas": 1, "runs": [run]}))
    return path


def table(*files: Path) -> subprocess.CompletedProcess:
    args = [a for f in files for a in ("--table", str(f))]
    return subprocess.run(
        [sys.executable, "-m", "bench.reconcile", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_saved_runs_print_side_by_side_emulator_first(tmp_path):
    real = saved(tmp_path / "real.json", "real control plane", 10, 25)
    emulator = saved(tmp_path / "emulator.json", "emulator", 10, 20)
    done = table(real, emulator)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2].split() == ["emulator", "real", "control", "plane"]
    writes = next(line for line in lines if line.startswith("operator writes per object"))
    assert writes.split()[-2:] == ["2.00", "2.50"]
    assert any(line.startswith("writes during 30 s idle") for line in lines)


def test_runs_of_different_sizes_are_refused(tmp_path):
    done = table(
        saved(tmp_path / "a.json", "emulator", 10, 20), saved(tmp_path / "b.json", "emulator", 20, 40)
    )
    assert done.returncode == 2
    assert "differ in --objects and --replicas" in done.stderr


def test_a_file_that_is_not_a_saved_run_is_refused(tmp_path):
    (tmp_path / "notes.json").write_text("not json")
    (tmp_path / "other.json").write_text('{"objects": 10, "replicas": 1, "runs": [{"backend": "emulator"}]}')
    for name in ("notes.json", "other.json", "missing.json"):
        done = table(tmp_path / name)
        assert done.returncode == 2, name
        assert f"{name}: not a run saved by --save" in done.stderr
