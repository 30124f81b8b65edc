"""One lifecycle for every local program of the dev cluster: start, wait until ready, stop, read the log.

:class:`LocalProcess` runs one program (etcd and the Kubernetes components, Prometheus, Envoy, the endpoint
picker, the operator, real engines) with its output appended to a log file. :meth:`~LocalProcess.wait_ready`
polls a probe until it answers, failing at once if the program exits; :meth:`~LocalProcess.stop` sends
SIGTERM, waits a grace period, then SIGKILL, and reaps the child. Failures carry the tail of the log, which is
what one needs to see why a program did not come up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Self

# How long a killed process may take to be reaped before stop() gives up waiting.
_KILL_WAIT_SECONDS = 5.0
_TAIL_BYTES = 3000


class ProcessFailed(RuntimeError):
    """A local program exited before it was ready, or did not get ready in time (the log's tail included)."""


class LocalProcess:
    """One local program: ``argv`` with ``env`` added to this process's environment, run in ``cwd``.

    Output (stdout and stderr) is appended to ``log``, so a restart keeps the earlier lines. With
    ``process_group``, the program leads a process group of its own and :meth:`stop` signals the whole group
    (for programs that start children of their own). With ``inherit``, only those variables of this process's
    environment are passed on (for programs that must not see this process's virtualenv or test settings).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        log: str | Path | None = None,
        *,
        process_group: bool = False,
        inherit: Sequence[str] | None = None,
    ) -> None:
        """Describe the program; nothing runs before :meth:`start`. Without ``log`` the output is dropped."""
        self.name = name
        self.argv = [str(arg) for arg in argv]
        self.env = dict(env or {})
        self.cwd = Path(cwd) if cwd is not None else None
        self.log = Path(log) if log is not None else None
        self.process_group = process_group
        self.inherit = None if inherit is None else tuple(inherit)
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The running (or last) child's process id; None before the first start."""
        return self._popen.pid if self._popen is not None else None

    @property
    def running(self) -> bool:
        """Whether the program was started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once the program has exited (negative: killed by that signal)."""
        return self._popen.poll() if self._popen is not None else None

    def start(self) -> Self:
        """Start the program (a no-op while it runs)."""
        if self.running:
            return self
        output: IO[bytes] | int = subprocess.DEVNULL
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            output = self.log.open("ab")
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**self._inherited(), **self.env},
                cwd=self.cwd,
                start_new_session=self.process_group,
            )
        finally:
            if not isinstance(output, int):
                output.close()  # the child holds its own descriptor
        return self

    def wait_ready(self, probe: Callable[[], bool], timeout: float, *, interval: float = 0.1) -> None:
        """Poll ``probe`` until it returns True; :class:`ProcessFailed` if the program exits or ``timeout`` passes.

        A probe that raises ``OSError`` (nothing listening yet) counts as not ready.
        """
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise ProcessFailed(
                    f"{self.name} exited ({self.returncode}) before it was ready:\n{self.log_tail()}"
                )
            try:
                if probe():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ProcessFailed(f"{self.name} was not ready within {timeout:g}s:\n{self.log_tail()}")
            time.sleep(interval)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, up to ``grace`` seconds to exit, then SIGKILL; the child is reaped either way."""
        popen = self._popen
        if popen is None or popen.poll() is not None:
            return
        self._signal(popen, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        try:
            popen.wait(grace if grace > 0 else _KILL_WAIT_SECONDS)
            return
        except subprocess.TimeoutExpired:
            pass
        self._signal(popen, signal.SIGKILL)
        popen.wait(_KILL_WAIT_SECONDS)

    def kill(self) -> None:
        """SIGKILL at once (a crash, for tests of recovery) and reap the child."""
        self.stop(grace=0)

    def log_tail(self, limit: int = _TAIL_BYTES) -> str:
        """The last ``limit`` bytes of the log, as text ("(no log)" when there is none)."""
        if self.log is None:
            return "(no log)"
        try:
            with self.log.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - limit))
                return log.read().decode(errors="replace")
        except OSError:
            return "(no log)"

    def _inherited(self) -> dict[str, str]:
        """The part of this process's environment the child starts from."""
        if self.inherit is None:
            return dict(os.environ)
        return {name: os.environ[name] for name in self.inherit if name in os.environ}

    def _signal(self, popen: subprocess.Popen[bytes], signum: signal.Signals) -> None:
        try:
            if self.process_group:
                os.killpg(popen.pid, signum)
            else:
                popen.send_signal(signum)
        except ProcessLookupError:
            pass  # it exited between the check and the signal
