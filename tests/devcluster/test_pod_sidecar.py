"""A decode pod's rendered ``pd-sidecar`` container run as the dev cluster runs it: the flags translated, then
llm-d's sidecar itself between the pod's address and a stand-in engine on the pod's address (no vLLM needed;
the sidecar binary is built from its Go module, a skip without Go, a failure under ``CI=true``)."""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ascend_fleet.render import render_all, validate
from ascend_fleet.render.pdsidecar import PD_SIDECAR_CONTAINER, sidecar_args
from ascend_fleet_dev.fleet.enginepods import named_container
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable
from ascend_fleet_dev.real.disaggregation import SIDECAR_CONNECTOR, ensure_pd_sidecar
from ascend_fleet_dev.real.podsidecar import (
    SidecarUnfit,
    start_pod_sidecar,
    translate_flags,
)
from tests.support.documents import example

POD_IP = "127.0.0.1"  # the engine's and the relay's address: a pod's own loopback address here


def decode_pod() -> dict:
    obj = validate(example("vllm-disaggregated-routed.yaml").build()).obj
    decode = [
        o
        for o in render_all(obj)
        if o["kind"] == "Pod" and named_container(o, PD_SIDECAR_CONTAINER) is not None
    ]
    assert decode, "the routed example renders no decode leader with a sidecar"
    return decode[0]


def test_the_rendered_flags_become_free_ports_and_the_cpu_connector():
    pod = decode_pod()
    container = named_container(pod, PD_SIDECAR_CONTAINER)
    assert container is not None and container["args"] == sidecar_args(validate(
        example("vllm-disaggregated-routed.yaml").build()).obj.spec)  # fmt: skip
    flags = translate_flags(container["args"])
    rendered = dict(zip(container["args"][::2], container["args"][1::2], strict=False))
    assert (flags.port, flags.engine_port) == (int(rendered["-port"]), int(rendered["-vllm-port"]))
    assert rendered["-connector"] == "nixlv2"
    assert flags.rest == ("-connector", SIDECAR_CONNECTOR, "-secure-proxy=false")
    assert any("nixlv2 -> lmcache" in change for change in flags.changes), flags.changes


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--port=9", "-vllm-port", "10", "-v", "-x=1"], (9, 10, ("-v", "-x=1"))),
        (["-port", "9", "-vllm-port=10", "-connector", "sglang"], (9, 10, ("-connector=sglang",))),
    ],
)
def test_go_flag_forms_are_read(args, expected):
    flags = translate_flags(args)
    assert (flags.port, flags.engine_port, flags.rest) == expected


def test_a_container_without_its_ports_is_refused_with_the_flag_it_lacks():
    with pytest.raises(SidecarUnfit, match="no -vllm-port"):
        translate_flags(["-port", "8000", "-connector", "nixlv2"])


class Engine(BaseHTTPRequestHandler):
    """Answers every GET with its path, as the engine behind the sidecar."""

    def do_GET(self) -> None:
        body = json.dumps({"engine": True, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def sidecar_binary() -> str:
    try:
        return str(ensure_pd_sidecar())
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must build the P/D sidecar: {error}")
        pytest.skip(str(error))


def test_the_sidecar_serves_on_the_pods_port_and_reaches_the_engine_on_the_pods_address(tmp_path):
    binary = sidecar_binary()
    engine = ThreadingHTTPServer((POD_IP, 0), Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    port = free_port()
    container = {"args": ["-port", str(port), "-vllm-port", str(engine.server_address[1]),
                          "-connector", "nixlv2", "-secure-proxy=false"]}  # fmt: skip
    sidecar = start_pod_sidecar(container, POD_IP, binary=binary, workdir=tmp_path)
    try:
        # The sidecar's own health on the pod's port, through the relay...
        with urllib.request.urlopen(f"http://{POD_IP}:{port}/health", timeout=10) as answer:
            assert answer.status == 200
        # ...and a path it hands to its engine, which it calls on localhost: it reaches the pod's engine.
        with urllib.request.urlopen(f"http://{POD_IP}:{port}/v1/models", timeout=10) as answer:
            assert json.load(answer) == {"engine": True, "path": "/v1/models"}
        assert sidecar.process.port != port  # it runs on a port of its own, behind the relay
    finally:
        sidecar.stop()
        engine.shutdown()
        engine.server_close()
