"""Every generated vllm-ascend command line, translated for a CPU host, starts a real vLLM server to /health.

One step past the parser (``test_engine_parsers.py``): a flag the parser accepts but the server refuses at
start, or a combination that fails while the engine builds, shows here. The cases are the parser's (the
examples plus the generated variants); each is translated by the dev cluster's one translation
(``ascend_fleet_dev.real.vllm_engine.translate``), and each *distinct* translated argv boots once, one at
a time, with a time limit: the translation folds many cases into one (every tensor/pipeline size becomes 1,
every precision float32), and each boot takes about a minute. Headless ranks start no server and are counted.
"""

from __future__ import annotations

import os
import shlex

import pytest

from ascend_fleet_dev.real.vllm_engine import NotAnEngine, translate
from tests.exporter.support import free_port
from tests.realengine.server import START_TIMEOUT, ServerFailed, VllmServer
from tests.realengine.support import vllm_cpu_or_skip

from .test_engine_parsers import cases

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("ASCEND_FLEET_ENGINES_PYTHON"),
        reason="the boot check runs under `make test-engines` (ASCEND_FLEET_ENGINES_PYTHON)",
    ),
    pytest.mark.timeout(0),  # the loop bounds each boot by START_TIMEOUT itself
]
PORT_PLACEHOLDER = 1  # every case gets the same port while deduplicating, its own free one when it boots
BOOTED: dict[str, int] = {}  # what the terminal summary prints


def distinct_servers(model: str) -> tuple[dict[tuple[str, ...], list[str]], int]:
    """Translated argv -> the ids of the parser cases it stands for; and how many cases start no engine."""
    found: dict[tuple[str, ...], list[str]] = {}
    headless = 0
    for case in cases()["vllm"]:
        try:
            served = translate(
                {"command": case["argv"]},
                model=model,
                field_values={},
                host="127.0.0.1",
                port=PORT_PLACEHOLDER,
            )
        except NotAnEngine:
            headless += 1
            continue
        found.setdefault(tuple(served.argv), []).append(case["id"])
    return found, headless


def with_port(argv: list[str], port: int) -> list[str]:
    """The argv with the value of its one ``--port`` replaced."""
    index = argv.index("--port")
    assert argv.count("--port") == 1 and argv[index + 1] == str(PORT_PLACEHOLDER), argv
    return [*argv[: index + 1], str(port), *argv[index + 2 :]]


def test_every_distinct_translated_vllm_command_line_boots(tmp_path):
    built = vllm_cpu_or_skip()
    servers, headless = distinct_servers(str(built.model))
    assert len(servers) >= 3, "too few distinct command lines: the translation or the cases changed"
    failed = []
    for index, (argv, ids) in enumerate(servers.items()):
        port = free_port()
        runnable = [str(built.vllm), *with_port(list(argv[1:]), port)]
        server = VllmServer(runnable, {"HF_HUB_OFFLINE": "1"}, tmp_path / f"boot-{index}.log", port).start()
        try:
            seconds = server.wait_healthy(START_TIMEOUT)
            print(f"booted in {seconds:.0f} s: {shlex.join(argv[3:])} (parser cases: {', '.join(ids)})")
        except ServerFailed as error:
            failed.append(f"{ids[0]} (+{len(ids) - 1} cases): {shlex.join(argv)}\n{error}")
        finally:
            server.stop()
    BOOTED.update(
        servers=len(servers) - len(failed), cases=sum(map(len, servers.values())), headless=headless
    )
    assert not failed, "\n\n".join(failed)
