"""The HTTP endpoint on its own: one listener per port, an IPv4 fallback, errors that stay readable."""

from __future__ import annotations

import errno
import threading

import pytest

from ascend_fleet_exporter import server
from ascend_fleet_exporter.metrics import CONTENT_TYPE

from .scrape import scrape
from .support import free_port


@pytest.fixture
def serve():
    started: list[server.MetricsServer] = []

    def start(render, port=None):
        bound = server.bind(port or free_port(), render)
        assert bound is not None
        threading.Thread(target=bound.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(bound)
        return bound

    yield start
    for bound in started:
        bound.shutdown()
        bound.server_close()


def test_metrics_body_and_content_type(serve):
    bound = serve(lambda: "up 1\n")
    assert scrape(bound.server_port) == ("up 1\n", CONTENT_TYPE)


def test_a_second_listener_on_the_port_is_refused(serve):
    bound = serve(lambda: "")
    assert server.bind(bound.server_port, lambda: "") is None


def test_a_render_failure_is_a_500_not_a_dead_server(serve):
    def broken() -> str:
        raise RuntimeError("boom")

    bound = serve(broken)
    with pytest.raises(OSError, match="500"):
        scrape(bound.server_port)
    assert scrape(bound.server_port, "/")[0].startswith("ascend-fleet NPU exporter")


def test_without_ipv6_it_listens_on_ipv4(serve, monkeypatch):
    def no_ipv6(*args, **kwargs):
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")

    monkeypatch.setattr(server._DualStackServer, "__init__", no_ipv6)
    bound = serve(lambda: "v4 1\n")
    assert bound.address_family.name == "AF_INET"
    assert scrape(bound.server_port)[0] == "v4 1\n"


def test_other_bind_errors_are_raised(monkeypatch):
    def denied(*args, **kwargs):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(server._DualStackServer, "__init__", denied)
    with pytest.raises(PermissionError):
        server.bind(free_port(), lambda: "")
