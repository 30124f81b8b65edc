"""The exporter inside one process: sampling threads, publishing, serving, and what it does when a tool is missing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.local.process import guarded_popen
from ascend_fleet_exporter import metrics, runtime
from ascend_fleet_exporter.collectors import NpuSmi, TorchNpuStats
from ascend_fleet_exporter.config import ExporterConfig
from ascend_fleet_exporter.runtime import Exporter, ProblemLog, bound_torch_npu
from ascend_fleet_exporter.spool import record_path

from .scrape import by_device, parse, scrape
from .support import child_env, free_port, install_fake_npu_smi, port_free
from .test_collectors import GOOD, Provider


@pytest.fixture
def npu_smi(tmp_path, monkeypatch) -> NpuSmi:
    install_fake_npu_smi(tmp_path, {n: 10 * (n + 1) for n in range(8)})
    monkeypatch.setenv("FAKE_NPU_SMI_DATA", str(tmp_path / "npu-smi-data"))
    return NpuSmi(str(tmp_path / "bin" / "npu-smi"))


@pytest.fixture
def config(tmp_path) -> ExporterConfig:
    return ExporterConfig(port=free_port(), interval=0.1, spool_dir=tmp_path / "spool")


def series_with(port: int, name: str, devices: set[str]) -> dict:
    series = parse(scrape(port)[0])
    assert set(by_device(series, name)) == devices
    return series


def test_an_exporter_samples_publishes_serves_and_withdraws(config, npu_smi):
    exporter = Exporter(config, Provider({3: GOOD}), npu_smi).start()
    try:
        series = wait_for(lambda: series_with(config.port, metrics.NPU_UTILIZATION_RATIO, {"3"}))
        assert exporter.serving
        assert by_device(series, metrics.NPU_UTILIZATION_RATIO) == {"3": 0.4}
        assert by_device(series, metrics.MEMORY_FRAGMENTATION_RATIO) == {"3": 0.1}
        assert by_device(series, metrics.MEMORY_SLACK_RATIO) == {"3": pytest.approx(0.2)}
        assert record_path(config.spool, exporter.pid).exists()
    finally:
        exporter.stop()
    assert not record_path(config.spool, exporter.pid).exists()
    assert port_free(config.port)


def test_without_torch_npu_it_says_so_and_reports_every_device_from_npu_smi(
    config, npu_smi, monkeypatch, caplog
):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    caplog.set_level(logging.WARNING, "ascend_fleet_exporter")
    exporter = Exporter(config, TorchNpuStats(), npu_smi).start()
    try:
        series = wait_for(
            lambda: series_with(config.port, metrics.NPU_UTILIZATION_RATIO, {str(n) for n in range(8)})
        )
    finally:
        exporter.stop()
    assert metrics.MEMORY_FRAGMENTATION_RATIO not in series
    assert series[metrics.EXPORTER_SCRAPE_ERRORS_TOTAL][(("collector", "torch_npu"),)] == 1.0
    warnings = [r.getMessage() for r in caplog.records if "torch_npu cannot be imported" in r.getMessage()]
    assert len(warnings) == 1


def npu_smi_failed_once(port: int) -> dict | None:
    series = parse(scrape(port)[0])
    errors = series.get(metrics.EXPORTER_SCRAPE_ERRORS_TOTAL, {})
    if errors.get((("collector", "npu_smi"),)) == 1.0 and by_device(
        series, metrics.MEMORY_FRAGMENTATION_RATIO
    ):
        return series
    return None


def test_without_npu_smi_allocator_metrics_still_flow(config, tmp_path, caplog):
    caplog.set_level(logging.WARNING, "ascend_fleet_exporter")
    exporter = Exporter(config, Provider({0: GOOD}), NpuSmi(str(tmp_path / "absent-npu-smi"))).start()
    try:
        series = wait_for(lambda: npu_smi_failed_once(config.port))
    finally:
        exporter.stop()
    assert by_device(series, metrics.MEMORY_FRAGMENTATION_RATIO) == {"0": 0.1}
    assert metrics.NPU_UTILIZATION_RATIO not in series
    assert "absent-npu-smi is not installed or not on PATH" in caplog.text


def test_problems_are_logged_once_per_period(caplog):
    now = [0.0]
    log = ProblemLog(logging.getLogger("test.problems"), repeat_after=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.problems"):
        log.warn(["a", "b"])
        log.warn(["a"])
        now[0] = 61
        log.warn(["a", "b"])
    assert [r.getMessage() for r in caplog.records] == ["a", "b", "a", "b"]


def test_bound_torch_npu_never_imports_and_needs_an_initialized_runtime(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    assert bound_torch_npu() is None
    assert "torch_npu" not in sys.modules
    state = {"on": False}
    fake = SimpleNamespace(npu=SimpleNamespace(is_initialized=lambda: state["on"]))
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    assert bound_torch_npu() is None
    state["on"] = True
    assert bound_torch_npu() is fake
    monkeypatch.setitem(sys.modules, "torch_npu", SimpleNamespace())  # half-imported: no `npu` yet
    assert bound_torch_npu() is None


def test_start_exporter_returns_the_running_one(monkeypatch, config):
    monkeypatch.setattr(runtime, "_active", None)
    provider = Provider({0: GOOD})
    first = runtime.start_exporter(config, stats=provider, npu_smi=NpuSmi("absent-npu-smi"))
    try:
        assert runtime.start_exporter(config) is first
    finally:
        first.stop()


def test_a_forked_child_lets_go_of_the_port_and_arms_itself(tmp_path):
    port = free_port()
    script = textwrap.dedent(f"""
        import os, sys, time
        from ascend_fleet_exporter import runtime
        from ascend_fleet_exporter.collectors import NpuSmi
        from ascend_fleet_exporter.config import ExporterConfig

        class Provider:
            def device_count(self): return 1
            def memory_stats(self, device): return {{"reserved_bytes.all.current": 1}}

        runtime.arm()
        exporter = runtime.start_exporter(ExporterConfig({port}, 0.1, spool_dir={str(tmp_path)!r}),
                                          stats=Provider(), npu_smi=NpuSmi("absent-npu-smi"))
        while not exporter.serving:
            time.sleep(0.05)
        child = os.fork()
        if child == 0:
            os.write(1, f"child armed {{runtime.is_armed()}}\\n".encode())  # one write: the pipe is shared
            time.sleep(30)
            os._exit(0)
        os.write(1, f"grandchild {{child}}\\n".encode())
        time.sleep(0.5)
        os._exit(0)  # the serving process dies; its forked child lives on
    """)
    process = guarded_popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env({"ASCEND_FLEET_EXPORTER": "1"}),
    )
    assert process.stdout is not None
    lines = [process.stdout.readline().strip(), process.stdout.readline().strip()]
    said = {line.split()[0]: line for line in lines if line}
    assert set(said) == {"child", "grandchild"}, lines
    grandchild = int(said["grandchild"].split()[1])
    try:
        assert said["child"] == "child armed True"
        process.wait(timeout=10)
        wait_for(lambda: port_free(port), timeout=5)
    finally:
        os.kill(grandchild, signal.SIGKILL)
