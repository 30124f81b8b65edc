"""The exporter's info series: which backend it reads NPUs through, and "none" on a host without torch_npu."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from ascend_fleet.kube import wait_for
from ascend_fleet_exporter import metrics, runtime
from ascend_fleet_exporter.collectors import NpuSmi
from ascend_fleet_exporter.config import ExporterConfig
from ascend_fleet_exporter.metrics import DeviceSample, render_exposition
from ascend_fleet_exporter.runtime import Exporter

from .scrape import parse, scrape
from .support import child_env, free_port
from .test_collectors import GOOD, Provider

NONE = {(("backend", "none"),): 1.0}
NO_NPU_LINE = "torch_npu is not installed in this engine's environment"


def info(port: int) -> dict | None:
    return parse(scrape(port)[0]).get(metrics.EXPORTER_INFO)


def test_the_info_series_carries_the_backend_and_is_left_out_without_one():
    with_backend = parse(render_exposition({"0": DeviceSample(ooms=0)}, backend="torch_npu"))
    assert with_backend[metrics.EXPORTER_INFO] == {(("backend", "torch_npu"),): 1.0}
    assert metrics.EXPORTER_INFO not in parse(render_exposition({"0": DeviceSample(ooms=0)}))
    assert parse(render_exposition({}, backend=metrics.BACKEND_NONE)) == {metrics.EXPORTER_INFO: NONE}


def test_the_backend_is_the_collector_that_reads(tmp_path):
    config = ExporterConfig(port=free_port(), interval=0.1, spool_dir=tmp_path)
    assert Exporter(config, Provider({0: GOOD}), NpuSmi("absent")).backend == metrics.COLLECTOR_TORCH_NPU
    assert Exporter(config, None, NpuSmi("absent")).backend == metrics.COLLECTOR_NPU_SMI
    assert Exporter(config, None, None).backend == metrics.BACKEND_NONE


def test_a_collector_that_turns_out_missing_no_longer_counts(tmp_path):
    config = ExporterConfig(port=free_port(), interval=0.1, spool_dir=tmp_path)
    exporter = Exporter(config, None, NpuSmi(str(tmp_path / "absent-npu-smi"))).start()
    try:
        wait_for(lambda: info(config.port) == NONE)
    finally:
        exporter.stop()


def test_without_torch_npu_every_process_races_and_the_winner_says_so_once(tmp_path):
    """Two engine processes of one pod on a host without torch_npu: one serves the info series, one line says why."""
    port = free_port()
    script = textwrap.dedent("""
        import threading
        from ascend_fleet_exporter import vllm_plugin
        vllm_plugin.register()
        threading.Event().wait()
    """)
    env = child_env(
        {"ASCEND_FLEET_EXPORTER": "1", "ASCEND_FLEET_EXPORTER_PORT": str(port)},
    )
    env["ASCEND_FLEET_EXPORTER_DIR"] = str(tmp_path / "spool")
    engines = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        assert wait_for(lambda: info(port) == NONE)
        body = scrape(port)[0]
    finally:
        for engine in engines:
            engine.kill()
    said = "".join(engine.communicate(timeout=10)[1] for engine in engines)
    assert said.count(NO_NPU_LINE) == 1, said
    assert "ascend_fleet_exporter" in said and 'ascend_fleet_exporter_info{backend="none"}' in said
    assert metrics.NPU_UTILIZATION_RATIO not in body


def test_an_exporter_with_collectors_replaces_the_one_without(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "_active", None)
    first_port, second_port = free_port(), free_port()
    idle = runtime.start_without_npu(ExporterConfig(port=first_port, interval=0.1, spool_dir=tmp_path))
    assert runtime.start_without_npu(ExporterConfig(port=second_port)) is idle
    config = ExporterConfig(port=second_port, interval=0.1, spool_dir=tmp_path)
    reading = runtime.start_exporter(config, stats=Provider({0: GOOD}), npu_smi=NpuSmi("absent-npu-smi"))
    try:
        assert reading is not idle and reading.backend == metrics.COLLECTOR_TORCH_NPU
        assert wait_for(lambda: info(second_port) == {(("backend", "torch_npu"),): 1.0})
        assert not idle.serving
    finally:
        reading.stop()
        idle.stop()
