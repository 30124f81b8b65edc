"""The exporter's settings, read from the engine container's environment.

The renderer sets these on engine containers (see ``docs/exporter.md``); the names and defaults
here are the contract between the pod template and the exporter:

- ``ASCEND_FLEET_EXPORTER``: ``1`` turns the exporter on; unset or ``0`` leaves the engine untouched.
- ``ASCEND_FLEET_EXPORTER_PORT``: the port of ``/metrics`` (default 9410, container port ``npu-metrics``).
- ``ASCEND_FLEET_EXPORTER_INTERVAL``: seconds between samples (default 5).
- ``ASCEND_FLEET_EXPORTER_DIR``: the per-pod directory where engine processes publish their samples
  (default ``/dev/shm/ascend-fleet-exporter-<port>``, else under the temp directory).
- ``ASCEND_FLEET_EXPORTER_SNAPSHOTS``: ``1`` opens ``/memory-snapshot`` (off by default: 404).
- ``ASCEND_FLEET_EXPORTER_SNAPSHOT_TOKEN_FILE``: a file holding the bearer token ``/memory-snapshot`` asks for;
  unset, the endpoint answers loopback peers only (``kubectl port-forward``, ``kubectl exec``).
- ``ASCEND_FLEET_EXPORTER_SNAPSHOT_KEEP``: snapshots kept, the oldest removed first (default 3).
- ``ASCEND_FLEET_EXPORTER_SNAPSHOT_MAX_BYTES``: the largest snapshot file kept (default 256 MiB).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ENV_ENABLED = "ASCEND_FLEET_EXPORTER"
ENV_PORT = "ASCEND_FLEET_EXPORTER_PORT"
ENV_INTERVAL = "ASCEND_FLEET_EXPORTER_INTERVAL"
ENV_SPOOL_DIR = "ASCEND_FLEET_EXPORTER_DIR"
ENV_SNAPSHOTS = "ASCEND_FLEET_EXPORTER_SNAPSHOTS"
ENV_SNAPSHOT_TOKEN_FILE = "ASCEND_FLEET_EXPORTER_SNAPSHOT_TOKEN_FILE"
ENV_SNAPSHOT_KEEP = "ASCEND_FLEET_EXPORTER_SNAPSHOT_KEEP"
ENV_SNAPSHOT_MAX_BYTES = "ASCEND_FLEET_EXPORTER_SNAPSHOT_MAX_BYTES"

DEFAULT_PORT = 9410
DEFAULT_INTERVAL_SECONDS = 5.0
# Snapshots live in the pod's /dev/shm, which counts against the pod's memory: a few, each bounded. A snapshot
# without allocation history is a list of segments and blocks, a few MiB even on a full 64 GiB device.
DEFAULT_SNAPSHOT_KEEP = 3
MAX_SNAPSHOT_KEEP = 100
DEFAULT_SNAPSHOT_MAX_BYTES = 256 * 2**20
PORT_NAME = "npu-metrics"
METRICS_PATH = "/metrics"

# How the renderer starts SGLang with the exporter: `python3 -m <this> <sglang.launch_server args>`.
SGLANG_LAUNCHER_MODULE = "ascend_fleet_exporter.sglang"
# The name of the vLLM general plugin; list it in VLLM_PLUGINS if a deployment restricts plugins.
VLLM_PLUGIN_NAME = "ascend_fleet_exporter"

_TRUE = frozenset({"1", "true", "yes", "on"})
# /dev/shm is a memory emptyDir in engine pods: shared by the engine's processes, gone with the pod.
_SHARED_MEMORY = Path("/dev/shm")

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


def exporter_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``ASCEND_FLEET_EXPORTER`` asks for the exporter (``1``, ``true``, ``yes`` or ``on``)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_ENABLED, "").strip().lower() in _TRUE


def parse_port(text: str | None) -> int | None:
    """A TCP port from its text, or ``None`` when the text is empty or not a port."""
    try:
        port = int((text or "").strip())
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


def parse_interval(text: str | None) -> float | None:
    """A sampling interval in seconds from its text, or ``None`` when empty, not positive or not finite."""
    try:
        seconds = float((text or "").strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def parse_count(text: str | None, most: int) -> int | None:
    """A whole number 1..``most`` from its text, or ``None``."""
    try:
        count = int((text or "").strip())
    except ValueError:
        return None
    return count if 0 < count <= most else None


def parse_visible_devices(text: str | None) -> list[int] | None:
    """``ASCEND_RT_VISIBLE_DEVICES`` as a list of the container's device ids; ``None`` when unset or malformed.

    The runtime shows a process the listed devices as 0..n-1, in the listed order.
    """
    items = [item.strip() for item in (text or "").split(",")]
    if not any(items) or not all(item.isdigit() for item in items):
        return None
    return [int(item) for item in items]


def pod_device(local: int, visible: list[int] | None) -> int:
    """The container's id of the device a process calls ``local``.

    With ``ASCEND_RT_VISIBLE_DEVICES=2,3`` a process calls the container's device 3 "1"; ranks that
    each see only their own NPU would all call it "0", so records use the container's ids.
    """
    if visible is None or not 0 <= local < len(visible):
        return local
    return visible[local]


def default_spool_dir(port: int) -> Path:
    """Where a pod's engine processes publish samples: pod-private shared memory when there is some.

    The port is part of the name so that several exporters on one host (tests, local runs) never mix.
    """
    base = _SHARED_MEMORY if _SHARED_MEMORY.is_dir() and os.access(_SHARED_MEMORY, os.W_OK) else None
    return (base or Path(tempfile.gettempdir())) / f"ascend-fleet-exporter-{port}"


@dataclass(frozen=True)
class ExporterConfig:
    """Settings of one exporter process."""

    port: int = DEFAULT_PORT
    interval: float = DEFAULT_INTERVAL_SECONDS
    spool_dir: Path | None = None
    npu_smi: str = "npu-smi"
    snapshots: bool = False  # /memory-snapshot is off unless asked for
    snapshot_token_file: Path | None = None  # None: loopback peers only
    snapshot_keep: int = DEFAULT_SNAPSHOT_KEEP
    snapshot_max_bytes: int = DEFAULT_SNAPSHOT_MAX_BYTES

    @property
    def spool(self) -> Path:
        """The spool directory, defaulted from the port."""
        return Path(self.spool_dir) if self.spool_dir else default_spool_dir(self.port)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ExporterConfig:
        """Settings from the environment; a malformed value is logged and replaced by its default."""
        env = os.environ if environ is None else environ
        port = _setting(env, ENV_PORT, parse_port, DEFAULT_PORT, "a TCP port (1..65535)")
        interval = _setting(env, ENV_INTERVAL, parse_interval, DEFAULT_INTERVAL_SECONDS, "seconds > 0")
        spool = env.get(ENV_SPOOL_DIR, "").strip()
        token = env.get(ENV_SNAPSHOT_TOKEN_FILE, "").strip()
        keep = _setting(
            env,
            ENV_SNAPSHOT_KEEP,
            lambda t: parse_count(t, MAX_SNAPSHOT_KEEP),
            DEFAULT_SNAPSHOT_KEEP,
            f"a count 1..{MAX_SNAPSHOT_KEEP}",
        )
        most = _setting(
            env,
            ENV_SNAPSHOT_MAX_BYTES,
            lambda t: parse_count(t, 2**40),
            DEFAULT_SNAPSHOT_MAX_BYTES,
            "bytes > 0",
        )
        return cls(
            port=port,
            interval=interval,
            spool_dir=Path(spool) if spool else None,
            snapshots=env.get(ENV_SNAPSHOTS, "").strip().lower() in _TRUE,
            snapshot_token_file=Path(token) if token else None,
            snapshot_keep=keep,
            snapshot_max_bytes=most,
        )


def _setting(
    env: Mapping[str, str], name: str, parse: Callable[[str], _T | None], default: _T, expected: str
) -> _T:
    text = env.get(name, "").strip()
    if not text:
        return default
    value = parse(text)
    if value is None:
        _log.warning("%s=%r is not %s; using the default %s", name, text, expected, default)
        return default
    return value
