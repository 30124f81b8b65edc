"""The sidecar command line the operator renders into decode pods is one llm-d's sidecar accepts: run as the
program itself (built from tools/pd-sidecar), it parses the flags and listens, for each engine's protocol."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from ascend_fleet.render.children import render_all
from ascend_fleet.render.pdsidecar import PD_SIDECAR_CONTAINER
from ascend_fleet.render.validation import validate
from ascend_fleet_dev.real.dataplane import free_port
from ascend_fleet_dev.real.disaggregation import ensure_pd_sidecar
from tests.unit.test_pd_routing import routed

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def sidecar_binary():
    return ensure_pd_sidecar()


def rendered_args(engine: str, chip: str) -> list[str]:
    decode = next(
        o for o in render_all(validate(routed(engine, chip)).obj) if o["metadata"]["name"] == "pd-decode-0"
    )
    (sidecar,) = (c for c in decode["spec"]["containers"] if c["name"] == PD_SIDECAR_CONTAINER)
    return sidecar["args"]


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(("engine", "chip"), [("vllm-ascend", "ascend910b"), ("sglang", "ascend910_93")])
def test_the_sidecar_takes_the_rendered_flags(sidecar_binary, engine, chip):
    args = rendered_args(engine, chip)
    # The pod's ports are the rendered ones; on this host the sidecar takes free ones instead.
    port, engine_port = free_port(), free_port()
    args[args.index("-port") + 1] = str(port)
    args[args.index("-vllm-port") + 1] = str(engine_port)
    process = subprocess.Popen([str(sidecar_binary), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not listening(port):
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            assert time.monotonic() < deadline, "the sidecar did not listen within 30 s"
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(10)
