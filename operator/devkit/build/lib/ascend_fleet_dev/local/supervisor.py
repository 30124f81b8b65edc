"""Keep local programs running: reap a program that died and start it again after a backoff.

A :class:`Supervisor` watches the :class:`~ascend_fleet_dev.local.process.LocalProcess` objects put in
its care from one thread. Every poll reaps an exited child (so none is left a zombie), and a program that exited
without being stopped through the supervisor is started again after a backoff that doubles on each quick death
(1 s, 2 s, 4 s ... up to 30 s) and resets once a run lasted :data:`STABLE_SECONDS`, as a kubelet restarts a
crashing container. :meth:`Supervisor.hold` stops a program and keeps it stopped (an outage on purpose) until
:meth:`Supervisor.release`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ascend_fleet_dev.local.process import LocalProcess

logger = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# A run this long counts as healthy: the next death is restarted after the first backoff again.
STABLE_SECONDS = 60.0
POLL_SECONDS = 0.2


@dataclass
class Supervised:
    """One program in the supervisor's care, with its restart history."""

    process: LocalProcess
    on_restart: Callable[[LocalProcess], None] | None = None
    held: bool = False
    restarts: int = 0
    backoff: float = FIRST_BACKOFF_SECONDS
    started_at: float = field(default_factory=time.monotonic)
    restart_at: float | None = None
    exits: list[int | None] = field(default_factory=list)


def restart_delay(backoff: float, ran_for: float) -> tuple[float, float]:
    """(the wait before this restart, the backoff for the next one) after a run of ``ran_for`` seconds.

    A quick death waits ``backoff`` and doubles it (capped); a death after a stable run waits the first backoff.
    """
    delay = FIRST_BACKOFF_SECONDS if ran_for >= STABLE_SECONDS else backoff
    return delay, min(delay * 2, MAX_BACKOFF_SECONDS)


class Supervisor:
    """Restarts the programs in its care when they die; one daemon thread polls them (start/stop)."""

    def __init__(self, name: str = "dev cluster", *, poll_seconds: float = POLL_SECONDS) -> None:
        """An idle supervisor; programs are added with :meth:`watch`, the thread runs after :meth:`start`."""
        self.name = name
        self.poll_seconds = poll_seconds
        self._programs: dict[str, Supervised] = {}
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Supervisor:
        """Start polling (a no-op while it polls)."""
        if self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name=f"supervisor of {self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling; the programs keep running (stop them with :meth:`forget`)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def watch(self, process: LocalProcess, on_restart: Callable[[LocalProcess], None] | None = None) -> None:
        """Take a started ``process`` into care; ``on_restart`` runs after each restart (in the poll thread)."""
        with self._lock:
            self._programs[process.name] = Supervised(process, on_restart)

    def forget(self, name: str, grace: float = 10.0) -> LocalProcess | None:
        """Stop ``name`` (SIGTERM, then SIGKILL after ``grace``), reap it and leave it out of care from now on."""
        with self._lock:
            program = self._programs.pop(name, None)
        if program is not None:
            program.process.stop(grace)
        return program.process if program is not None else None

    def hold(self, name: str, grace: float = 10.0) -> None:
        """Stop ``name`` and keep it stopped, not restarted, until :meth:`release`."""
        program = self._program(name)
        with self._lock:
            program.held = True
            program.restart_at = None
        program.process.stop(grace)

    def release(self, name: str) -> LocalProcess:
        """Start a held ``name`` again at once (no backoff); returns the process, without waiting until ready."""
        program = self._program(name)
        with self._lock:
            program.held = False
            program.backoff = FIRST_BACKOFF_SECONDS
            program.started_at = time.monotonic()
            program.process.start()
        return program.process

    def restarts(self, name: str) -> int:
        """How often ``name`` was restarted after dying on its own."""
        return self._program(name).restarts

    def exits(self, name: str) -> list[int | None]:
        """The exit statuses of ``name``'s unplanned deaths, oldest first (negative: killed by that signal)."""
        return list(self._program(name).exits)

    def held(self, name: str) -> bool:
        """Whether ``name`` is stopped on purpose."""
        return self._program(name).held

    def _program(self, name: str) -> Supervised:
        with self._lock:
            program = self._programs.get(name)
        if program is None:
            raise LookupError(f"{name} is not supervised by the {self.name} supervisor")
        return program

    def _run(self) -> None:
        while not self._stopping.wait(self.poll_seconds):
            with self._lock:
                programs = list(self._programs.values())
            for program in programs:
                try:
                    self._check(program)
                except Exception:  # one bad restart must not end supervision of the others
                    logger.exception("supervising %s failed", program.process.name)

    def _check(self, program: Supervised) -> None:
        now = time.monotonic()
        with self._lock:
            if self._programs.get(program.process.name) is not program:
                return  # forgotten since this poll's snapshot: being stopped on purpose
            # `running` polls the child, which reaps it once it has exited.
            if program.held or program.process.running:
                return
            if program.restart_at is None:
                ran_for = now - program.started_at
                program.exits.append(program.process.returncode)
                delay, program.backoff = restart_delay(program.backoff, ran_for)
                program.restart_at = now + delay
                logger.warning(
                    "%s exited (%s) after %.1fs; restarting in %.1fs",
                    program.process.name,
                    program.process.returncode,
                    ran_for,
                    program.restart_at - now,
                )
                return
            if now < program.restart_at:
                return
            program.restart_at = None
            program.restarts += 1
            program.started_at = now
            program.process.start()
        if program.on_restart is not None:
            program.on_restart(program.process)
