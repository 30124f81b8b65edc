"""A real ``vllm serve`` for tests: the dev cluster's own process lifecycle, time-boxed, always stopped."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from ascend_fleet_dev.local.process import ProcessFailed
from ascend_fleet_dev.real.vllm_engine import STOP_GRACE_SECONDS, health_probe, serve_process

START_TIMEOUT = 300.0


class ServerFailed(AssertionError):
    """The server exited or did not answer ``/health`` in time; the message ends with its log."""


def http(method: str, url: str, body: dict | None = None, timeout: float = 60.0) -> tuple[int, str]:
    """Status and text of one request (an HTTP error status is an answer, not an exception)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def process_group_rss_bytes(leader: int) -> int:
    """Resident memory of every process in ``leader``'s process group, from /proc."""
    group, total = os.getpgid(leader), 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != group:
                continue
            fields = (entry / "status").read_text().split("VmRSS:", 1)[1].split()
            total += int(fields[0]) * 1024
        except (OSError, IndexError, ValueError):
            continue
    return total


class VllmServer:
    """One ``vllm serve`` process group with its log file, run by the dev cluster's :func:`serve_process`."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log: Path, port: int) -> None:
        self.log, self.port = log, port
        self.process = serve_process("vllm serve", argv, env, log)
        self.started = 0.0

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VllmServer:
        """Start the server as the leader of its own process group."""
        self.started = time.monotonic()
        self.process.start()
        return self

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> float:
        """Seconds from start to the first ``200`` on ``/health``; raises :class:`ServerFailed`."""
        remaining = self.started + timeout - time.monotonic()
        try:
            self.process.wait_ready(health_probe(self.url), remaining, interval=1.0)
        except ProcessFailed as error:
            raise ServerFailed(str(error)) from error
        return time.monotonic() - self.started

    def rss_bytes(self) -> int:
        """Resident memory of the server's whole process group."""
        assert self.process.pid is not None
        return process_group_rss_bytes(self.process.pid)

    def tail(self, lines: int = 60) -> str:
        """The end of the server's log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the whole process group (API server, engine core, workers): grace, then kill."""
        self.process.stop(grace=STOP_GRACE_SECONDS)
