"""A vllm-ascend pod's engine command, translated into a ``vllm serve`` that vLLM's CPU build runs here.

:func:`translate` is the one place that decides what a CPU host cannot do as the pod says. It takes the
engine container's command, args and env as the renderer wrote them and keeps everything else as it is,
so the real server meets the operator's own flags. What it changes (``docs/real-cluster.md`` lists the
same rows):

- the served model path (the positional, or ``--model``) -> the tiny model;
- ``--quantization``/``-q`` (``ascend``: ModelSlim weights on NPU kernels) -> dropped;
- ``--dtype`` -> ``float32`` (bfloat16 kills the worker with SIGILL on a first very short prompt);
- ``--gpu-memory-utilization`` -> ``--kv-cache-memory-bytes`` (a fixed, small KV cache in host memory);
- ``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp`` -> 1 (one CPU process);
- ``--distributed-executor-backend``, ``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``
  -> dropped; a multi-pod replica's leader serves the whole replica, its other ranks start no engine;
- ``--max-model-len`` -> at most the tiny model's context;
- ``--host``/``--port`` and ``ASCEND_FLEET_EXPORTER_PORT`` -> where the caller listens (the pod's own
  ports unless it moves them: every local pod shares the host's ports);
- ``--kv-transfer-config`` (a two-role fleet's vllm-ascend connector) -> vLLM's ``ExampleConnector`` in the same
  ``kv_role``, its KV files under a shared folder (vllm-ascend's connectors need NPUs and Mooncake);
- ``VLLM_CACHE_ROOT`` (``spec.engine.compilation.cacheDir``, a path the pod mounts) -> a folder under the host's
  temp dir;
- environment: the pod's, expanded as the kubelet does, plus ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_fleet_dev.local.process import LocalProcess
from ascend_fleet_dev.real.tinymodel import MAX_POSITIONS
from ascend_fleet_exporter.config import ENV_PORT as EXPORTER_PORT_ENV

DEFAULT_KV_CACHE_BYTES = 64 * 1024 * 1024
# Where the CPU stand-in connector of a two-role fleet writes and finds the KV cache (shared by both roles).
KV_SHARED_STORAGE = str(Path(tempfile.gettempdir()) / "ascend-fleet-kv")
# Where the compile cache goes on this host when the pod names one (its own path is a volume the pod mounts).
COMPILE_CACHE_ENV = "VLLM_CACHE_ROOT"
COMPILE_CACHE = str(Path(tempfile.gettempdir()) / "ascend-fleet-compile-cache")
DROPPED = frozenset(
    {
        "--quantization",
        "-q",
        "--gpu-memory-utilization",
        "--distributed-executor-backend",
        "--nnodes",
        "-n",
        "--node-rank",
        "-r",
        "--master-addr",
        "--master-port",
    }
)
ONE_PROCESS = frozenset({"--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp"})
SWITCHES_DROPPED = frozenset({"--headless"})
# What a real server takes from this process's environment; the rest comes from the pod.
PASSED_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "XDG_CACHE_HOME")
# API server, engine core and workers exit on SIGTERM within this; the group is killed after it.
STOP_GRACE_SECONDS = 20.0
_NUMBER = re.compile(r"^-\d")
_VARIABLE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class NotAnEngine(ValueError):
    """The container starts no vLLM server (a Ray worker, a headless rank, another program)."""


@dataclass(frozen=True)
class CpuServe:
    """The translated server: its argv, its environment and one line per change made."""

    argv: list[str]
    env: dict[str, str]
    changes: list[str] = field(default_factory=list)


def expand_variables(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes, anything else stays."""
    return _VARIABLE.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def engine_environment(container: Mapping[str, Any], field_values: Mapping[str, str]) -> dict[str, str]:
    """The container's variables, each expanded from the ones before it; ``fieldRef`` from ``field_values``."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = expand_variables(str(entry["value"]), env)
            continue
        path = entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if path in field_values:
            env[entry["name"]] = field_values[path]
    return env


def serve_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``vllm serve ...`` as the container runs it: command + args expanded, a Ray leader's script unwrapped."""
    argv = [
        expand_variables(token, env) for token in [*container.get("command", []), *container.get("args", [])]
    ]
    if argv[:2] == ["/bin/bash", "-c"] and len(argv) >= 3:
        # A Ray leader runs its serve argv as the script's positional parameters: bash -c SCRIPT $0 ARGV...
        if not argv[2].endswith('exec "$@"'):
            raise NotAnEngine("the container runs a Ray worker; the replica's leader serves alone here")
        argv = argv[4:]
    if argv[:2] != ["vllm", "serve"]:
        raise NotAnEngine(f"the container does not run vllm serve: {shlex.join(argv[:3])}")
    if "--headless" in argv:
        raise NotAnEngine("a headless rank runs engine workers only; the replica's leader serves alone here")
    return argv


def options(tokens: list[str]) -> list[tuple[str, str | None]]:
    """Flags and their values, in order (``--flag=value`` split); a token that is not a flag is a value."""
    parsed: list[tuple[str, str | None]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        name, equals, value = token.partition("=")
        if equals and token.startswith("-"):
            parsed.append((name, value))
            index += 1
            continue
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if following is not None and (not following.startswith("-") or _NUMBER.match(following)):
            parsed.append((token, following))
            index += 2
        else:
            parsed.append((token, None))
            index += 1
    return parsed


def translate(
    container: Mapping[str, Any],
    *,
    model: str,
    field_values: Mapping[str, str],
    host: str | None = None,
    port: int | None = None,
    exporter_port: int | None = None,
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
    vllm: str = "vllm",
) -> CpuServe:
    """The CPU server for a vllm-ascend engine container (see the module docstring); raises :class:`NotAnEngine`."""
    env = engine_environment(container, field_values)
    argv = serve_argv(container, env)
    tokens = argv[2:]
    changes: list[str] = []
    served = tokens[0] if tokens and not tokens[0].startswith("-") else None
    if served is not None:
        tokens = tokens[1:]
        changes.append(f"model path {served} -> {model}")
    out: list[str] = [vllm, "serve", model]
    for name, value in options(tokens):
        out += _translated(name, value, host=host, port=port, changes=changes)
    out += ["--dtype", "float32", "--kv-cache-memory-bytes", str(kv_cache_bytes)]
    changes.append(f"--kv-cache-memory-bytes {kv_cache_bytes} (KV cache in host memory)")
    if host is not None and "--host" not in out:
        out += ["--host", host]
    if port is not None and "--port" not in out:
        out += ["--port", str(port)]
    env["HF_HUB_OFFLINE"] = "1"
    if COMPILE_CACHE_ENV in env:
        changes.append(f"{COMPILE_CACHE_ENV} {env[COMPILE_CACHE_ENV]} -> {COMPILE_CACHE}")
        env[COMPILE_CACHE_ENV] = COMPILE_CACHE
    if exporter_port is not None and EXPORTER_PORT_ENV in env:
        changes.append(f"{EXPORTER_PORT_ENV} {env[EXPORTER_PORT_ENV]} -> {exporter_port}")
        env[EXPORTER_PORT_ENV] = str(exporter_port)
    return CpuServe(argv=out, env=env, changes=changes)


def _translated(
    name: str, value: str | None, *, host: str | None, port: int | None, changes: list[str]
) -> list[str]:
    """The tokens one pod flag becomes on a CPU host (none when dropped); notes each change."""
    shown = name if value is None else f"{name} {value}"
    if name == "--model":
        changes.append(f"{shown} -> the tiny model")
        return []
    if name == "--dtype":
        changes.append(f"{shown} -> float32")
        return []
    if name in DROPPED or name in SWITCHES_DROPPED:
        changes.append(f"{shown} -> dropped")
        return []
    if name in ONE_PROCESS:
        changes.append(f"{shown} -> 1")
        return [name, "1"]
    if name == "--max-model-len" and value is not None and value.isdigit() and int(value) > MAX_POSITIONS:
        changes.append(f"{shown} -> {MAX_POSITIONS} (the tiny model's context)")
        return [name, str(MAX_POSITIONS)]
    if name == "--kv-transfer-config" and value is not None:
        role = json.loads(value).get("kv_role")
        config = {
            "kv_connector": "ExampleConnector",
            "kv_role": role,
            "kv_connector_extra_config": {"shared_storage_path": KV_SHARED_STORAGE},
        }
        changes.append(f"{name} -> vLLM's ExampleConnector as {role} (KV files under {KV_SHARED_STORAGE})")
        return [name, json.dumps(config, separators=(",", ":"))]
    if name == "--host" and host is not None:
        changes.append(f"{shown} -> {host}")
        return [name, host]
    if name == "--port" and port is not None and value != str(port):
        changes.append(f"{shown} -> {port}")
        return [name, str(port)]
    return [name] if value is None else [name, value]


def serve_process(name: str, argv: list[str], env: Mapping[str, str], log: str | Path) -> LocalProcess:
    """A real ``vllm serve`` as a :class:`LocalProcess`: its own process group, only :data:`PASSED_ENV` inherited.

    vLLM starts an engine core and workers of its own, so stopping signals the whole group; the test's or the
    dev cluster's virtualenv settings stay out of the engine's environment.
    """
    return LocalProcess(name, argv, env=env, log=log, process_group=True, inherit=PASSED_ENV)


def health_probe(url: str, path: str = "/health", timeout: float = 2.0) -> Callable[[], bool]:
    """A probe for :meth:`LocalProcess.wait_ready`: ``GET {url}{path}`` answers 200."""

    def healthy() -> bool:
        with urllib.request.urlopen(f"{url}{path}", timeout=timeout) as response:
            return bool(response.status == 200)

    return healthy
