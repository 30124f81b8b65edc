"""Prefill/decode disaggregation on one machine: two real ``vllm serve`` engines and llm-d's P/D sidecar.

:class:`Disaggregated` runs what one prefill pod and one decode pod run, as processes:

- the prefill engine and the decode engine, each a ``vllm serve`` of the tiny model (vLLM's CPU build,
  ``make engine-vllm``) with vLLM's ``ExampleConnector``: the prefill engine writes each prompt's KV cache as
  files under a shared directory, keyed by the prompt's tokens, and the decode engine loads them from there
  instead of computing them;
- the P/D sidecar in front of the decode engine (:func:`ensure_pd_sidecar` builds llm-d's ``pd-sidecar`` from
  its Go module, ``tools/pd-sidecar``): a request whose ``x-prefiller-host-port`` header names a prefill engine
  goes there first with one output token, then unchanged to the decode engine; without the header it goes
  straight to the decode engine.

The sidecar's ``lmcache`` protocol is that two-step exchange and nothing more (the KV cache moves through
whatever connector the engines run), so it serves ExampleConnector as well. Every process leads its own
process group and is stopped with it, engines first started and last stopped.
"""

from __future__ import annotations

import json
import tempfile
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from prometheus_client.parser import text_string_to_metric_families

from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.real.controlplane import ControlPlaneUnavailable, cached_go_build
from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable, Process
from ascend_fleet_dev.real.vllm_engine import (
    DEFAULT_KV_CACHE_BYTES,
    STOP_GRACE_SECONDS,
    health_probe,
    serve_process,
)
from ascend_fleet_dev.real.vllm_env import VllmCpu

# vLLM's connector that moves the KV cache through files of a shared directory (vLLM's own example connector).
KV_CONNECTOR = "ExampleConnector"
KV_ROLE = "kv_both"
# The sidecar's header naming the prefill engine (host:port), as llm-d's picker plugins and this project's set it.
PREFILL_HEADER = "x-prefiller-host-port"
# The sidecar's protocol: prefill with one output token, then the unchanged request to the decode engine.
SIDECAR_CONNECTOR = "lmcache"
# vLLM's counter of prompt tokens by where their KV cache came from, and its sources.
PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source"
SOURCE_COMPUTED = "local_compute"
SOURCE_TRANSFERRED = "external_kv_transfer"
SERVED_MODEL = "tiny"
ENGINE_START_TIMEOUT = 300.0
_SIDECAR_START_TIMEOUT = 30.0


def pd_sidecar_source() -> Path:
    """``tools/pd-sidecar`` of the checkout this package runs from."""
    return Path(__file__).resolve().parents[4] / "tools" / "pd-sidecar"


def ensure_pd_sidecar(*, build: bool = True, progress: Any = None) -> Path:
    """The P/D sidecar binary: ``$ASCEND_FLEET_PD_SIDECAR``, else the cached build of ``tools/pd-sidecar``.

    A cold build downloads the module's dependencies and compiles them (about a minute on two cores)."""
    try:
        return cached_go_build(
            pd_sidecar_source(), "pd-sidecar", what="the P/D sidecar", override_env="ASCEND_FLEET_PD_SIDECAR",
            make_target="pd-sidecar", build=build, progress=progress,
        )  # fmt: skip
    except ControlPlaneUnavailable as error:
        raise DataPlaneUnavailable(str(error)) from None


def kv_transfer_config(shared_directory: str | Path) -> str:
    """``--kv-transfer-config`` for ExampleConnector over ``shared_directory`` (both roles in one engine)."""
    return json.dumps(
        {
            "kv_connector": KV_CONNECTOR,
            "kv_role": KV_ROLE,
            "kv_connector_extra_config": {"shared_storage_path": str(shared_directory)},
        }
    )


def tiny_serve_argv(
    environment: VllmCpu,
    port: int,
    shared_directory: str | Path | None,
    *,
    host: str = "127.0.0.1",
    served_name: str = SERVED_MODEL,
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
) -> list[str]:
    """``vllm serve`` of the tiny model on ``host:port`` as ``served_name``, with ExampleConnector over
    ``shared_directory`` (None: an ordinary engine without a KV connector); float32 and a fixed KV cache in host
    memory as every CPU engine here (see :mod:`.vllm_engine`)."""
    kv = [] if shared_directory is None else ["--kv-transfer-config", kv_transfer_config(shared_directory)]
    return [
        str(environment.vllm), "serve", str(environment.model), "--served-model-name", served_name,
        "--host", host, "--port", str(port), "--dtype", "float32",
        "--kv-cache-memory-bytes", str(kv_cache_bytes), *kv,
    ]  # fmt: skip


def prompt_tokens_by_source(metrics_text: str) -> dict[str, float]:
    """vLLM's prompt-token counter by source (``local_compute``, ``external_kv_transfer`` ...), summed over
    its other labels, from a ``/metrics`` text."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != PROMPT_TOKENS_BY_SOURCE:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                source = sample.labels.get("source", "")
                totals[source] = totals.get(source, 0.0) + sample.value
    return totals


class TinyEngine:
    """One ``vllm serve`` of the tiny model with ExampleConnector (none without ``shared_directory``), leading
    its own process group."""

    def __init__(
        self,
        environment: VllmCpu,
        role: str,
        shared_directory: Path | None,
        workdir: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        served_name: str = SERVED_MODEL,
    ) -> None:
        self.role, self.shared_directory, self.host = role, shared_directory, host
        self.port = port or free_port()
        argv = tiny_serve_argv(environment, self.port, shared_directory, host=host, served_name=served_name)
        self.process = serve_process(
            f"vllm serve ({role})", argv, {"HF_HUB_OFFLINE": "1"}, workdir / f"{role}.log"
        )

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host_port}"

    def start(self) -> Self:
        self.process.start()
        return self

    def wait_healthy(self, timeout: float = ENGINE_START_TIMEOUT) -> None:
        """Wait for ``/health``; :class:`~ascend_fleet_dev.local.process.ProcessFailed` with the log's tail."""
        self.process.wait_ready(health_probe(self.url), timeout, interval=1.0)

    def prompt_tokens(self) -> dict[str, float]:
        """The engine's prompt tokens by source now, from its own ``/metrics``."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as answer:
            return prompt_tokens_by_source(answer.read().decode())

    def stop(self) -> None:
        self.process.stop(grace=STOP_GRACE_SECONDS)


class PdSidecar(Process):
    """llm-d's P/D sidecar in front of a decode engine on this host, over plain HTTP."""

    name = "pd-sidecar"

    def __init__(
        self,
        decode_port: int,
        *,
        binary: str | Path | None = None,
        workdir: str | Path | None = None,
        flags: Sequence[str] = ("-connector", SIDECAR_CONNECTOR, "-secure-proxy=false"),
    ) -> None:
        """On a free port, in front of the engine on ``127.0.0.1:decode_port``, with ``flags`` beside."""
        super().__init__(workdir)
        self.binary = Path(binary) if binary else ensure_pd_sidecar()
        self.port = free_port()
        self.argv = [str(self.binary), "-port", str(self.port), "-vllm-port", str(decode_port), *flags]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = _SIDECAR_START_TIMEOUT) -> Self:
        self._spawn(self.argv)
        self._wait_listening(self.port, timeout, "the P/D sidecar")
        return self

    def __enter__(self) -> Self:
        return self.start()


class Disaggregated:
    """A prefill engine, a decode engine and the sidecar in front of the decode engine, started together.

    Both engines share one directory for the KV cache unless ``decode_directory`` gives the decode engine
    another (then nothing it needs is ever found there: the control case). Given ``prefill``, that running
    engine is used (its directory shared) and left running; otherwise one is started and stopped here."""

    def __init__(
        self,
        environment: VllmCpu,
        *,
        sidecar_binary: str | Path | None = None,
        decode_directory: Path | None = None,
        prefill: TinyEngine | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="ascend-fleet-pd-")
        work = Path(self._tmp.name)
        shared = work / "kv"
        shared.mkdir()
        self.owns_prefill = prefill is None
        self.prefill = prefill or TinyEngine(environment, "prefill", shared, work)
        self.decode = TinyEngine(
            environment, "decode", decode_directory or self.prefill.shared_directory, work
        )
        self.sidecar = PdSidecar(self.decode.port, binary=sidecar_binary, workdir=work)

    @property
    def url(self) -> str:
        """Where requests go: the sidecar."""
        return self.sidecar.url

    def headers(self) -> Mapping[str, str]:
        """The header that sends a request's prefill to the prefill engine."""
        return {PREFILL_HEADER: self.prefill.host_port}

    def start(self, timeout: float = ENGINE_START_TIMEOUT) -> Self:
        """Start the engines side by side (each boots in about a minute on two cores), then the sidecar."""
        try:
            starting = [self.decode] + ([self.prefill] if self.owns_prefill else [])
            for engine in starting:
                engine.start()
            with ThreadPoolExecutor(len(starting)) as pool:
                for waited in [pool.submit(engine.wait_healthy, timeout) for engine in starting]:
                    waited.result()
            self.sidecar.start()
        except BaseException:  # a failed start or an interrupted test: nothing is left running
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the sidecar, then the engines (each whole process group), then remove the directory."""
        try:
            self.sidecar.stop()
        finally:
            try:
                self.decode.stop()
            finally:
                if self.owns_prefill:
                    self.prefill.stop()
                self._tmp.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
