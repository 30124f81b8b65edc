"""A real ``vllm serve`` for tests: started in its own process group, time-boxed, always killed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from ascend_fleet.devcluster.real.vllm_env import VllmCpu, repository_root

START_TIMEOUT = 300.0
# What the server takes from the test's own environment; the rest comes from the pod.
PASSED_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "XDG_CACHE_HOME")


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


def install_plugin(env: VllmCpu) -> None:
    """This checkout's package in the engine environment without dependencies, so vLLM finds its plugin."""
    subprocess.run(
        [
            str(env.python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--force-reinstall",
            str(repository_root()),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )


class VllmServer:
    """One ``vllm serve`` process group with its log file."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log: Path, port: int) -> None:
        self.argv, self.log, self.port = argv, log, port
        self.env = {**{k: v for k, v in os.environ.items() if k in PASSED_ENV}, **env}
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VllmServer:
        """Start the server as the leader of its own process group (setsid)."""
        self.started = time.monotonic()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> float:
        """Seconds from start to the first ``200`` on ``/health``; raises :class:`ServerFailed`."""
        assert self.process is not None
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"vllm serve exited with {self.process.returncode}:\n{self.tail()}")
            try:
                if http("GET", f"{self.url}/health", timeout=2)[0] == 200:
                    return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(1)
        raise ServerFailed(f"no /health within {timeout:.0f} s:\n{self.tail()}")

    def rss_bytes(self) -> int:
        """Resident memory of the server's whole process group, from /proc."""
        assert self.process is not None
        group, total = os.getpgid(self.process.pid), 0
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

    def tail(self, lines: int = 60) -> str:
        """The end of the server's log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Kill the whole process group (API server, engine core, workers) and reap the leader."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=20)
