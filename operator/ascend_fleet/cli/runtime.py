"""Long-running commands: the operator, the local cluster and the embedded demo.

Their heavy imports (kopf, kmock) happen inside the handlers, so ``validate`` and ``render`` stay fast.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run``, ``dev-cluster`` and ``dev`` to the CLI."""
    # Filled in as the operator, the local cluster and the demo land.
    del sub
