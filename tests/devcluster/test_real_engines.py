"""Which pods run as real vLLM engines, the cap on them, and the pod's metrics relay (no vLLM needed)."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ascend_fleet.api import names
from ascend_fleet.render import render_all, validate
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.real.realengines import (
    RealEngines,
    RealEnginesUnavailable,
    readiness_path,
    start_metrics_relay,
)
from ascend_fleet_dev.real.vllm_env import VllmCpu
from ascend_fleet_dev.stack import stack
from tests.support.documents import example, inference


class Controls:
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []
        self.crashed: list[tuple[str, str]] = []

    def crash(self, namespace: str, name: str, container: str | None = None) -> dict:
        self.crashed.append((namespace, name))
        return {}

    def fail(self, namespace: str, name: str) -> dict:
        self.failed.append((namespace, name))
        return {}


def pods(doc: dict) -> list[dict]:
    found = [o for o in render_all(validate(doc).obj) if o["kind"] == "Pod"]
    for pod in found:
        pod["metadata"].setdefault("namespace", "default")
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["status"] = {"podIP": "127.0.0.1"}
    return found


@pytest.fixture
def engines(tmp_path: Path) -> tuple[RealEngines, Controls]:
    controls = Controls()
    return RealEngines(VllmCpu(tmp_path / "absent"), controls, limit=0, workdir=tmp_path), controls


def test_a_vllm_leader_runs_here_sglang_and_ray_workers_stay_simulated(engines) -> None:
    real, _ = engines
    (single,) = pods(inference("one").engine("vllm-ascend").build())
    assert real.claims(single)
    multi = pods(example("vllm-multinode-tp8-pp4.yaml").build())
    claimed = {p["metadata"]["labels"][names.LABEL_RANK]: real.claims(p) for p in multi}
    assert claimed["0"] is True and not any(v for rank, v in claimed.items() if rank != "0")
    assert not any(real.claims(p) for p in pods(example("sglang-small.yaml").build()))


def test_an_engine_beyond_the_cap_is_refused_with_one_line(engines, caplog) -> None:
    real, controls = engines
    (pod,) = pods(inference("one").engine("vllm-ascend").build())
    real.on_pod_running(pod)
    assert controls.failed == [("default", pod["metadata"]["name"])]
    assert real.engine("default", pod["metadata"]["name"]) is None
    (line,) = real.refused.values()
    assert "0 real vLLM engines already run" in line and "--max-real-engines" in line
    assert [r.getMessage() for r in caplog.records] == [line]


def test_the_readiness_probe_port_is_resolved_by_name() -> None:
    (pod,) = pods(inference("one").engine("vllm-ascend").build())
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
    assert readiness_path(container) == ("/health", 8000)


def _serving(text: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_metrics_relay_serves_every_source_in_turn() -> None:
    engine, exporter = _serving(b"vllm:num_requests_running 0"), _serving(b"ascend_fleet_exporter_info 1\n")
    port = free_port()
    absent = f"http://127.0.0.1:{free_port()}/metrics"
    sources = tuple(f"http://127.0.0.1:{s.server_address[1]}/metrics" for s in (engine, exporter))
    relay = start_metrics_relay("127.0.0.1", port, (sources[0], absent, sources[1]))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
        assert body == "vllm:num_requests_running 0\nascend_fleet_exporter_info 1\n"
    finally:
        for server in (relay, engine, exporter):
            server.shutdown()
            server.server_close()


def test_real_engines_need_the_real_control_plane_and_a_known_kind() -> None:
    with pytest.raises(ValueError, match="engines must be one of simulated, vllm"), stack(engines="sglang"):
        pass
    with pytest.raises(RealEnginesUnavailable, match="real control plane only"), stack(engines="vllm"):
        pass
