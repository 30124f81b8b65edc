"""vLLM (and SGLang) general plugin that runs the NPU exporter inside the engine's processes.

Declared in ``pyproject.toml`` as::

    [project.entry-points."vllm.general_plugins"]
    ascend_fleet_exporter = "ascend_fleet_exporter.vllm_plugin:register"

    [project.entry-points."sglang.srt.plugins"]
    ascend_fleet_exporter = "ascend_fleet_exporter.vllm_plugin:register"

SGLang from 0.5.14 calls its general plugins the same way in every process it starts; older SGLang has
no plugin group, so the operator starts those images through ``python -m ascend_fleet_exporter.sglang``.

vLLM calls every general plugin in every process it creates (API server, engine core, one worker
per tensor-parallel rank, Ray workers). :func:`register` leaves all of them untouched unless
``ASCEND_FLEET_EXPORTER=1``; then it arms the exporter, which starts only in the processes that bind
an NPU. This module imports neither vLLM nor torch_npu.
"""

from __future__ import annotations

from ascend_fleet_exporter.hook import arm_safely


def register() -> None:
    """Entry point of the ``ascend_fleet_exporter`` plugin; safe to call any number of times."""
    arm_safely()
