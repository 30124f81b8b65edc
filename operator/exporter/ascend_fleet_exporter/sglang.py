"""``python -m ascend_fleet_exporter.sglang <args>``: SGLang's ``launch_server`` with the NPU exporter.

Every argument goes unchanged to ``sglang.launch_server``, which runs as if started with
``python -m sglang.launch_server <args>``. SGLang starts its scheduler processes (one per
tensor-parallel rank) with the ``spawn`` method, and a spawned child re-imports the parent's
``__main__`` module, this one, under the name ``__mp_main__``; that import arms the exporter in
each child, and it starts in those that bind an NPU.

Without SGLang installed, this prints what is missing and exits with status 2.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from collections.abc import Sequence

from ascend_fleet_exporter.hook import arm_safely

LAUNCH_SERVER = "sglang.launch_server"
EXIT_SGLANG_MISSING = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Arm the exporter, then run ``sglang.launch_server`` as ``__main__`` with ``argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    origin = _launch_server_origin()
    if origin is None:
        print(
            f"error: {LAUNCH_SERVER} is not importable: SGLang is not installed in this Python environment "
            f"({sys.executable}). Install SGLang in the engine image, or start the server with "
            f"`python -m {LAUNCH_SERVER}` (without the NPU exporter).",
            file=sys.stderr,
        )
        return EXIT_SGLANG_MISSING
    arm_safely()
    sys.argv = [origin, *args]
    # alter_sys=False keeps this module as __main__, which is what spawned children re-import.
    runpy.run_module(LAUNCH_SERVER, run_name="__main__", alter_sys=False)
    return 0


def _launch_server_origin() -> str | None:
    """The file of ``sglang.launch_server``, or ``None`` when SGLang (or that module) is absent."""
    if importlib.util.find_spec("sglang") is None:
        return None
    spec = importlib.util.find_spec(LAUNCH_SERVER)
    return None if spec is None else spec.origin or LAUNCH_SERVER


if __name__ == "__main__":
    sys.exit(main())
elif __name__ == "__mp_main__":
    arm_safely()
