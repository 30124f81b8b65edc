"""Free TCP ports on loopback for the local programs of the dev cluster."""

from __future__ import annotations

import fcntl
import socket
import tempfile
from pathlib import Path
from typing import IO


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


# Real clusters' pod addresses: 127.<block>.0.1 upwards, one /16 block per running cluster on this machine. The
# emulator's pods live in 127.10/16, a node agent started on its own in 127.11/16, the tests' hand-made targets
# in 127.100/16 and above.
FIRST_POD_BLOCK = 12
LAST_POD_BLOCK = 99


class PodNetwork:
    """A block of loopback addresses (``127.<block>.0.0/16``) held by one cluster for as long as it runs.

    Two real clusters on one machine (engineers' tests side by side) would otherwise give their pods the same
    addresses, and a real server of one would answer the other's readiness probes. The hold is an exclusive
    ``flock`` on a file per block in the temporary directory: the kernel drops it when the process dies.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        """Take the lowest free block; :class:`OSError` says so when every block is held."""
        self._file: IO[str] | None = None
        root = Path(directory or tempfile.gettempdir())
        for block in range(FIRST_POD_BLOCK, LAST_POD_BLOCK + 1):
            handle = (root / f"ascend-fleet-pod-network-{block}.lock").open("a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            self._file, self.block = handle, block
            return
        raise OSError(
            f"every pod address block 127.{FIRST_POD_BLOCK}-{LAST_POD_BLOCK}.0.0/16 is held by a running "
            f"cluster on this machine: stop one of them"
        )

    @property
    def first_ip(self) -> str:
        """The block's first pod address."""
        return f"127.{self.block}.0.1"

    def release(self) -> None:
        """Give the block back (idempotent)."""
        if self._file is not None:
            self._file.close()  # closing the only descriptor drops the flock
            self._file = None
