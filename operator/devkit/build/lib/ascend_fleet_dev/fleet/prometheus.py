"""A real Prometheus server for the local dev cluster and the control-loop tests.

:class:`PrometheusServer` runs the ``prometheus`` binary on 127.0.0.1 with a generated config in
its own directory. Engines are found through ``file_sd_configs`` (job ``ascend-fleet-engines``), one file
per group of targets (the simulated engines, the real ones), so :meth:`PrometheusServer.set_targets` changes
what is scraped without a reload and one group never overwrites another's. The server can be
stopped and started again on the same data directory and port, to test "Prometheus down, then back".
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import yaml

from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.local.process import LocalProcess, ProcessFailed

ENGINES_JOB = "ascend-fleet-engines"
ENGINES_GROUP = "engines"
_GROUP = re.compile(r"^[a-z0-9][a-z0-9-]*$")
BINARY_ENV = "ASCEND_FLEET_PROMETHEUS"
PROMETHEUS_INSTALL_HINT = (
    "install it with `apt-get install prometheus` on Debian or Ubuntu, otherwise unpack a release from "
    "https://prometheus.io/download/ and put `prometheus` on PATH or set "
    f"{BINARY_ENV} to its path"
)
_LOG_TAIL_BYTES = 2000
# Only ever talks to 127.0.0.1: ignore any HTTP proxy set in the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PrometheusNotFound(RuntimeError):
    """No ``prometheus`` binary could be found; the message says how to install one."""


class PrometheusError(RuntimeError):
    """Prometheus failed to start, or answered a request with an error."""


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not be reached (stopped, starting, or crashed)."""


@dataclass(frozen=True)
class Target:
    """One scrape target: ``host:port`` and the labels Prometheus attaches to all its series."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


def find_prometheus_binary(env: Mapping[str, str] | None = None) -> str:
    """Path of the Prometheus binary: ``$ASCEND_FLEET_PROMETHEUS`` if set, else ``prometheus`` on PATH."""
    env = os.environ if env is None else env
    configured = env.get(BINARY_ENV)
    if configured:
        if os.path.isfile(configured) and os.access(configured, os.X_OK):
            return configured
        raise PrometheusNotFound(
            f"{BINARY_ENV}={configured} is not an executable file; {PROMETHEUS_INSTALL_HINT}"
        )
    found = shutil.which("prometheus", path=env.get("PATH", os.defpath))
    if found is None:
        raise PrometheusNotFound(f"the prometheus binary is not on PATH; {PROMETHEUS_INSTALL_HINT}")
    return found


def render_config(
    targets_file: Path,
    *,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    rule_files: Sequence[Path] = (),
    extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The Prometheus configuration: the engines job over file_sd, then any extra scrape jobs."""
    engines = {
        "job_name": ENGINES_JOB,
        # Refreshing every second (besides the file watch) lets new pods be scraped within a second.
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
    }
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "scrape_configs": [engines, *(dict(job) for job in extra_scrape_configs)],
    }
    if rule_files:
        config["rule_files"] = [str(path) for path in rule_files]
    return config


def file_sd_groups(targets: Iterable[Target]) -> list[dict[str, Any]]:
    """The file_sd document for ``targets``: one group per target, so each keeps its own labels."""
    return [{"targets": [target.address], "labels": dict(target.labels)} for target in targets]


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader never sees a half-written file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


class PrometheusServer:
    """A ``prometheus`` process on 127.0.0.1 with its config, targets and data in one directory.

    Use it as a context manager, or call :meth:`start` and :meth:`close`. :meth:`stop` ends only the
    process; a later :meth:`start` serves the same data on the same port. When the interpreter
    exits normally, a server that was not closed is closed then.
    """

    def __init__(
        self,
        *,
        binary: str | None = None,
        directory: str | Path | None = None,
        port: int | None = None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        rule_files: Sequence[str | Path] = (),
        extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
        startup_timeout: float = 30.0,
    ) -> None:
        self.binary = binary or find_prometheus_binary()
        self._owns_directory = directory is None
        self.directory = Path(
            tempfile.mkdtemp(prefix="ascend-fleet-prometheus-") if directory is None else directory
        )
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_file = self.directory / "prometheus.yml"
        self.targets_file = self.directory / "targets" / "engines.json"
        self.data_dir = self.directory / "data"
        self.log_file = self.directory / "prometheus.log"
        self.startup_timeout = startup_timeout
        self.config = render_config(  # what start() writes to config_file
            self.targets_file.parent / "*.json",  # every group's file
            scrape_interval=scrape_interval,
            evaluation_interval=evaluation_interval,
            rule_files=[Path(path).resolve() for path in rule_files],
            extra_scrape_configs=extra_scrape_configs,
        )
        self._process: LocalProcess | None = None
        self._targets_lock = threading.Lock()
        self.targets_file.parent.mkdir(parents=True, exist_ok=True)
        if not self.targets_file.exists():
            write_atomically(self.targets_file, "[]\n")
        # A forgotten server must not outlive the interpreter (nor leave its temporary directory).
        atexit.register(self.close)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """Process id of the running server, or ``None`` when it is not running."""
        return self._process.pid if self._process is not None and self.running else None

    @property
    def running(self) -> bool:
        """Whether the process is alive (it may still be starting up)."""
        return self._process is not None and self._process.running

    def start(self) -> Self:
        """Start the process and wait until it is ready; does nothing if it already runs."""
        if self.running:
            return self
        write_atomically(self.config_file, yaml.safe_dump(self.config, sort_keys=False))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._process = LocalProcess(
            "prometheus",
            [
                self.binary,
                f"--config.file={self.config_file}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            log=self.log_file,
        ).start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End the process (SIGTERM, then SIGKILL after ``timeout``); data and port stay for a restart."""
        process, self._process = self._process, None
        if process is not None:
            process.stop(grace=timeout)

    def close(self) -> None:
        """Stop the process and remove the directory if this server created it."""
        atexit.unregister(self.close)
        self.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def set_targets(self, targets: Iterable[Target], group: str = ENGINES_GROUP) -> None:
        """Scrape exactly ``targets`` in the engines job for ``group`` (works while stopped, too).

        Each group is a file of its own, so the simulated and the real engines of one stack each keep
        theirs. Prometheus applies a change within about 5 s: its discovery manager batches updates.
        """
        if not _GROUP.match(group):
            raise ValueError(f"a target group is a lower-case word (letters, digits, dashes), not {group!r}")
        text = json.dumps(file_sd_groups(targets), indent=1, sort_keys=True) + "\n"
        with self._targets_lock:
            write_atomically(self.targets_file.with_name(f"{group}.json"), text)

    def query(self, promql: str, *, at: float | None = None, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Evaluate an instant query; return the result series (``[{"metric": {...}, "value": [t, "v"]}]``).

        A scalar or string result comes back as one series without labels. Raises
        :class:`PrometheusUnavailable` when the server cannot be reached and :class:`PrometheusError`
        when it rejects the query.
        """
        params = {"query": promql} if at is None else {"query": promql, "time": repr(at)}
        data = self._api("/api/v1/query", params, timeout)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def active_targets(self, *, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The active scrape targets as the ``/api/v1/targets`` API reports them."""
        return self._api("/api/v1/targets", {"state": "active"}, timeout)["activeTargets"]

    def wait_for_targets(self, count: int, *, job: str = ENGINES_JOB, timeout: float = 15.0) -> None:
        """Wait until ``job`` has exactly ``count`` targets and all were scraped successfully."""
        deadline = time.monotonic() + timeout
        while True:
            health = [
                target["health"] for target in self.active_targets() if target["labels"].get("job") == job
            ]
            if len(health) == count and all(state == "up" for state in health):
                return
            if time.monotonic() > deadline:
                raise PrometheusError(f"job {job} has targets {health} after {timeout:g}s, wanted {count} up")
            time.sleep(0.2)

    def reload(self, *, timeout: float = 5.0) -> None:
        """Ask the server to reread its config and rule files."""
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with _OPENER.open(request, timeout=timeout):
                pass
        except urllib.error.HTTPError as err:
            raise PrometheusError(f"reload failed: {err.read().decode(errors='replace').strip()}") from None
        except OSError as err:
            raise PrometheusUnavailable(f"Prometheus at {self.url} is not reachable: {err}") from None

    def _api(self, path: str, params: Mapping[str, str], timeout: float) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with _OPENER.open(url, timeout=timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as err:
            # The API reports bad queries as 4xx with a JSON body that says what was wrong.
            raise PrometheusError(f"{path} failed: {_api_error(err)}") from None
        except OSError as err:
            raise PrometheusUnavailable(f"Prometheus at {self.url} is not reachable: {err}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} failed: {body.get('error', body)}")
        return body["data"]

    def _wait_ready(self) -> None:
        process = self._process
        assert process is not None  # started just before
        try:
            process.wait_ready(self._answers_ready, self.startup_timeout)
        except ProcessFailed:
            tail = process.log_tail(_LOG_TAIL_BYTES)
            if not process.running:
                raise PrometheusError(f"prometheus exited during startup:\n{tail}") from None
            raise PrometheusError(
                f"prometheus was not ready within {self.startup_timeout:g}s:\n{tail}"
            ) from None

    def _answers_ready(self) -> bool:
        # Not listening yet, or 503 while it replays its write-ahead log, raise OSError: not ready.
        with _OPENER.open(f"{self.url}/-/ready", timeout=1.0) as response:
            return response.status == 200


def _api_error(err: urllib.error.HTTPError) -> str:
    try:
        return json.loads(err.read())["error"]
    except (ValueError, KeyError, OSError):
        return f"HTTP {err.code} {err.reason}"
