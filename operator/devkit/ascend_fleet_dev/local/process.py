"""One lifecycle for every local program of the dev cluster: start, wait until ready, stop, read the log.

:class:`LocalProcess` runs one program (etcd and the Kubernetes components, Prometheus, Envoy, the endpoint
picker, the operator, real engines) with its output appended to a log file. :meth:`~LocalProcess.wait_ready`
polls a probe until it answers, failing at once if the program exits; :meth:`~LocalProcess.stop` sends
SIGTERM, waits a grace period, then SIGKILL, and reaps the child. Failures carry the tail of the log, which is
what one needs to see why a program did not come up.

Nothing is left behind: every program leads a process group of its own, which the process's guard
(:mod:`.guard`) ends when this process is gone, even killed with SIGKILL before it could stop anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

from .guard import start_time

# How long a killed process may take to be reaped before stop() gives up waiting.
_KILL_WAIT_SECONDS = 5.0
_TAIL_BYTES = 3000


class _Guard:
    """This process's guard (see :mod:`.guard`): started with the first program, told of every group."""

    _lock = threading.Lock()
    _owner: int | None = None  # the pid that started the guard: a forked child needs a guard of its own
    _pipe: int | None = None

    @classmethod
    def tell(cls, line: str) -> None:
        with cls._lock:
            if cls._owner != os.getpid():
                cls._start()
            assert cls._pipe is not None
            os.write(cls._pipe, f"{line}\n".encode())

    @classmethod
    def _start(cls) -> None:
        read, write = os.pipe()
        script = Path(__file__).with_name("guard.py")
        try:
            subprocess.Popen(
                [sys.executable, "-I", str(script)],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read)
        # The guard is never waited for: it outlives this process by design (a reaped zombie until then).
        cls._owner, cls._pipe = os.getpid(), write


def guard_group(pgid: int) -> None:
    """Have this process's guard end process group ``pgid`` (led by process ``pgid``) when this process is gone."""
    _Guard.tell(f"+{pgid}:{start_time(pgid) or ''}")


def guarded_popen(args: Sequence[str], **options: Any) -> subprocess.Popen:
    """``subprocess.Popen`` for tests' own programs: in a process group of its own that the guard ends if this
    process goes first (the caller still stops and waits for it as before)."""
    process = subprocess.Popen(args, start_new_session=True, **options)
    guard_group(process.pid)
    return process


def release_group(pgid: int) -> None:
    """The group was reaped: the guard forgets it (its id may be reused)."""
    _Guard.tell(f"-{pgid}")


class ProcessFailed(RuntimeError):
    """A local program exited before it was ready, or did not get ready in time (the log's tail included)."""


class LocalProcess:
    """One local program: ``argv`` with ``env`` added to this process's environment, run in ``cwd``.

    Output (stdout and stderr) is appended to ``log``, so a restart keeps the earlier lines. Every program
    leads a process group of its own, which the guard ends if this process goes first; with ``process_group``,
    :meth:`stop` signals the whole group too (for programs that start children of their own). With ``inherit``, only those variables of this process's
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
                start_new_session=True,
            )
            guard_group(self._popen.pid)
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
        except subprocess.TimeoutExpired:
            self._signal(popen, signal.SIGKILL)
            popen.wait(_KILL_WAIT_SECONDS)
        release_group(popen.pid)

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
