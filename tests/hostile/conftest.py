"""Running ``ascend-fleet validate`` in a child process with memory and time limits, as a hostile file's reader."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
# The CLI's own imports take about 150 MiB of address space; a hostile file may not add much to that.
CLI_MEMORY = 1024 * 2**20
CLI_SECONDS = 30


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CLI_MEMORY, CLI_MEMORY))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def validate_in_child(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``ascend-fleet validate ARGUMENTS`` under the limits above; a timeout fails the test."""
    command = [sys.executable, "-m", "ascend_fleet.cli.main", "validate", *arguments]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=CLI_SECONDS, preexec_fn=_limits, check=False
    )


def expected(path: Path) -> str:
    """The sentence part a corpus file's first line promises: ``# expect: ...``."""
    first = path.read_bytes().split(b"\n", 1)[0].decode()
    assert first.startswith("# expect: "), f"{path.name} does not start with '# expect: '"
    return first.removeprefix("# expect: ")
