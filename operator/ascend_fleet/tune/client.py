"""The benchmark client: SGLang's own ``sglang.bench_serving``, run as a subprocess, one run per rung.

It speaks the OpenAI completions API (``--backend vllm`` against vLLM, ``sglang-oai`` against SGLang),
streams, ignores EOS so every request decodes its full output length, draws prompts of random token ids
(``random-ids``: no data set to download) and sends them at a fixed request rate (Poisson arrivals) with
at most ``batch`` requests in flight, so the engine's running batch is full at every rung and the
first-token latency measured is the engine's at that batch size, not time spent in its queue.

Building the command line and reading the result are pure (:func:`bench_argv`, :func:`parse_result`);
:func:`run_bench` is the subprocess.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ..engines import facts_of
from ..engines.registry import UnknownEngine
from .ladder import Rung
from .table import Row

CLIENT_MODULE = "sglang.bench_serving"
CLIENT_NAME = "sglang.bench_serving (SGLang 0.5.5)"
# The client's backend for an engine the registry does not know: vLLM's, plain OpenAI-compatible streaming.
DEFAULT_BACKEND = "vllm"
BENCH_CLIENT_INSTALL_HINT = (
    "the benchmark client is SGLang's sglang.bench_serving; install it with `make tune-client` "
    "(a Python environment of its own with sglang==0.5.5 and its client's dependencies), or point "
    "ASCEND_FLEET_TUNE_PYTHON at a Python that has SGLang"
)
CLIENT_ENV = "sglang-0.5.5"  # make tune-client's environment, under the cache folder
# tqdm's "12/64 [" as sglang.bench_serving prints it on stderr.
_PROGRESS = re.compile(rb"(\d+)/(\d+) \[")


def backend(engine: str) -> str:
    """The benchmark client's ``--backend`` for an engine type (its facts' tune backend)."""
    try:
        return facts_of(engine).tune_backend
    except UnknownEngine:
        return DEFAULT_BACKEND


class ClientError(RuntimeError):
    """The benchmark client is missing or failed; the message says what to do."""


@dataclass(frozen=True)
class Load:
    """The request mix every rung gets: the same rate and length distribution, so rungs compare."""

    request_rate: float = 64.0  # requests per second (mean of Poisson arrivals)
    input_tokens: int = 512  # the batch curve's reference prompt: the seeds' TTFT figures are at 512 tokens
    output_tokens: int = 64
    range_ratio: float = 0.5  # lengths are drawn uniformly from [ratio x len, len]
    prompts_per_slot: int = 4  # requests per batch slot: enough turnover to fill the batch again and again
    min_prompts: int = 48
    seed: int = 1

    def prompts(self, batch_size: int) -> int:
        """How many requests a rung sends."""
        return max(self.min_prompts, self.prompts_per_slot * batch_size)

    def describe(self) -> str:
        return (
            f"{self.request_rate:g} req/s, prompts {int(self.input_tokens * self.range_ratio)}-"
            f"{self.input_tokens} tokens, outputs {int(self.output_tokens * self.range_ratio)}-"
            f"{self.output_tokens} tokens"
        )


def bench_argv(
    endpoint: str,
    model: str,
    engine: str,
    rung: Rung,
    load: Load,
    tokenizer: Path,
    output: Path,
    python: str | None = None,
) -> list[str]:
    """The client's command line for one rung (``python`` by default :func:`client_python`)."""
    return [
        python or client_python(),
        "-m",
        CLIENT_MODULE,
        "--backend",
        backend(engine),
        "--base-url",
        endpoint.rstrip("/"),
        "--model",
        str(tokenizer),  # read for its tokenizer only; requests name the served model below
        "--served-model-name",
        model,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(load.input_tokens),
        "--random-output-len",
        str(load.output_tokens),
        "--random-range-ratio",
        f"{load.range_ratio:g}",
        "--num-prompts",
        str(load.prompts(rung.batch_size)),
        "--request-rate",
        f"{load.request_rate:g}",
        "--max-concurrency",
        str(rung.batch_size),
        "--warmup-requests",
        "1",
        "--seed",
        str(load.seed),
        "--output-file",
        str(output),
    ]


def parse_result(text: str, rung: Rung, sent: int) -> Row:
    """The table row from the client's JSONL output (its last line is this run)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ClientError("the benchmark client wrote no result (every request failed?)")
    result = json.loads(lines[-1])
    completed = int(result["completed"])
    return Row(
        batch_size=rung.batch_size,
        adaptive=rung.variant.label,
        tokens_per_second=float(result["output_throughput"]),
        ttft_p50_ms=float(result["median_ttft_ms"]),
        ttft_p99_ms=float(result["p99_ttft_ms"]),
        e2e_p99_ms=float(result["p99_e2e_latency_ms"]),
        completed=completed,
        failed=max(0, sent - completed),
    )


def client_python() -> str:
    """The Python that runs the client: ``$ASCEND_FLEET_TUNE_PYTHON``, else ``make tune-client``'s environment
    (kept apart so SGLang's packages never mix with the operator's), else this Python."""
    override = os.environ.get("ASCEND_FLEET_TUNE_PYTHON")
    if override:
        return override
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    python = cache / "ascend-fleet" / "tune-client" / CLIENT_ENV / "bin" / "python"
    return str(python) if python.exists() else sys.executable


def available() -> bool:
    """Whether the client can run in its Python."""
    python = client_python()
    if python == sys.executable:
        return importlib.util.find_spec("sglang") is not None
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def run_bench(
    argv: list[str],
    output: Path,
    rung: Rung,
    sent: int,
    log: Path,
    on_progress: Callable[[int, int], None] | None = None,
    timeout: float = 1800.0,
) -> Row:
    """Run the client for one rung and read its row; ``on_progress(done, total)`` follows its own count."""
    if not available():
        raise ClientError(BENCH_CLIENT_INSTALL_HINT)
    output.unlink(missing_ok=True)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TOKENIZERS_PARALLELISM": "false",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        assert process.stderr is not None
        # A buffered pipe (Popen's default bufsize), which has read1; typeshed types it as IO[bytes].
        stderr = cast(io.BufferedReader, process.stderr)
        tail = b""
        try:
            while chunk := stderr.read1(4096):
                out.write(chunk)
                tail = (tail + chunk)[-4096:]
                found = _PROGRESS.findall(tail)
                if found and on_progress is not None:
                    done, total = found[-1]
                    on_progress(int(done), int(total))
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    if process.returncode != 0 or not output.exists():
        lines = log.read_text(errors="replace").strip().splitlines()[-8:]
        raise ClientError(
            f"the benchmark client failed at batch {rung.label} (exit {process.returncode}); "
            f"its last lines:\n  " + "\n  ".join(lines)
        )
    return parse_result(output.read_text(), rung, sent)
