"""Proving the KV transfer of a running prefill/decode pair through Prometheus, and breaking it on purpose.

The pieces the KVTransfer test and ``bench/pd`` share:

- :func:`scrape_targets`: the prefill and decode engines as Prometheus scrape targets, labelled as the chart's
  pod monitor labels engine pods (``namespace``, ``inference``, ``pod`` = ``<name>-prefill-0`` /
  ``<name>-decode-0``), so the operator's own queries find them;
- :class:`KVSwitch`: the decode engine's KV directory is a symbolic link to the shared one; :meth:`KVSwitch.cut`
  points it at an empty directory while the engines run. vLLM's ExampleConnector looks a prompt's files up by
  path on every request, so from then on the decode engine finds nothing and computes every prompt itself,
  as a decode engine pointed at another directory does, and every request is still answered;
- :func:`condition`: the operator's own KVTransfer decision (:func:`~ascend_fleet.control.kvtransfer.
  kv_transfer_conditions`) over that Prometheus;
- :class:`SteadyClient`: a client sending fresh prompts through the sidecar at a steady pace, counting failures.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ascend_fleet.control.kvtransfer import kv_transfer_conditions
from ascend_fleet.control.prometheus import Prometheus
from ascend_fleet.status.kv_transfer import KVTransferStatus
from ascend_fleet_dev.fleet.prometheus import Target
from ascend_fleet_dev.real.disaggregation import SERVED_MODEL, Disaggregated

FLEET_NAMESPACE = "pd-proof"
FLEET_NAME = "pd"
# About 367 prompt tokens of the tiny model: whole KV blocks of the CPU build and a remainder.
PROMPT_WORDS = 100


def scrape_targets(
    pd: Disaggregated, namespace: str = FLEET_NAMESPACE, name: str = FLEET_NAME
) -> list[Target]:
    """The two engines' ``/metrics`` as the chart's pod monitor would label their pods."""
    return [
        Target(
            engine.host_port,
            {"namespace": namespace, "inference": name, "pod": f"{name}-{role}-0", "pd_role": role},
        )
        for role, engine in (("prefill", pd.prefill), ("decode", pd.decode))
    ]


class KVSwitch:
    """The decode engine's KV directory: a link to the shared directory that can be pointed elsewhere."""

    def __init__(self, root: Path) -> None:
        self.link, self.elsewhere = root / "decode-kv", root / "elsewhere"
        self.elsewhere.mkdir(parents=True, exist_ok=True)

    def point(self, target: Path) -> None:
        """Replace the link in one step (a request never sees it missing)."""
        temporary = self.link.with_name(f".{self.link.name}.new")
        if temporary.is_symlink():
            temporary.unlink()
        temporary.symlink_to(target, target_is_directory=True)
        os.replace(temporary, self.link)

    def cut(self) -> None:
        """From now on the decode engine looks for KV in an empty directory."""
        self.point(self.elsewhere)


def fleet_body(namespace: str = FLEET_NAMESPACE, name: str = FLEET_NAME) -> dict:
    """The smallest two-role AscendInference the condition's hook reads (its name, namespace and engine)."""
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"engine": {"type": "vllm-ascend"}, "disaggregation": {"prefill": {}, "decode": {}}},
    }


def condition(
    url: str, window: float, namespace: str = FLEET_NAMESPACE, name: str = FLEET_NAME
) -> KVTransferStatus:
    """The operator's KVTransfer decision now, over the Prometheus at ``url``."""
    bodies = [fleet_body(namespace, name)]
    decided = asyncio.run(kv_transfer_conditions(Prometheus(url, timeout=5.0), bodies, time.time(), window))
    return decided[(namespace, name)]


def wait_condition(
    url: str, window: float, status: str, timeout: float, interval: float = 1.0
) -> tuple[float, KVTransferStatus]:
    """Poll the decision until it has ``status``: the seconds it took and the condition; TimeoutError with the
    last one otherwise."""
    started = time.monotonic()
    last = condition(url, window)
    while last.status != status:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"KVTransfer not {status} within {timeout:g} s; last: {last}")
        time.sleep(interval)
        last = condition(url, window)
    return time.monotonic() - started, last


def fresh_prompt(words: int = PROMPT_WORDS) -> str:
    """A prompt no engine has seen: neither a prefix cache nor the shared directory can hold it yet."""
    tag = uuid.uuid4().hex[:8]
    return " ".join(f"{tag}{i}" if i % 10 == 0 else f"w{i}" for i in range(words))


def complete(
    url: str, prompt: str, headers: Mapping[str, str], tokens: int = 4, timeout: float = 120
) -> dict:
    """One greedy completion; an HTTP error raises."""
    body = {"model": SERVED_MODEL, "prompt": prompt, "max_tokens": tokens, "temperature": 0}
    request = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.load(answer)


@dataclass
class SteadyClient:
    """Fresh prompts to ``url`` one after another, a pause of ``pause`` seconds between them, until stopped."""

    url: str
    headers: Mapping[str, str]
    pause: float = 1.0
    send: Callable[[str, str, Mapping[str, str]], dict] = complete
    answered: int = 0
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SteadyClient:
        self._thread = threading.Thread(target=self._run, name="kv-traffic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=180)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.send(self.url, fresh_prompt(), self.headers)
                self.answered += 1
            except Exception as error:  # counted, not raised: the client's view is the figure
                self.failed.append(f"{type(error).__name__}: {error}")
            self._stop.wait(self.pause)
