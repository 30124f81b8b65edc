"""What a simulated NPU reports per core type and for HBM bandwidth, by chip generation (pure).

A real exporter reads these from ``npu-smi info -t usages``, whose lines differ by chip (docs/exporter.md,
"Which chip reports what"): an Atlas A2 (``ascend910b``) or A3 (``ascend910_93``) with a current driver prints
AI Cube, AI Vector, AI CPU and HBM bandwidth; a 910A (``ascend910a``) prints no AI Cube and no AI Vector line.
A reading the chip does not print is ``None`` here, so the simulated engine exports no series for it, as the
real exporter does.

The values follow the replica's AI Core utilization ``u`` the way LLM serving loads an NPU: decoding streams
the weights and the KV cache from HBM for each token, so HBM bandwidth tracks the load closely and saturates
first, while the matrix unit (AI Cube) stays at about half of the AI Core figure; vector work (attention
softmax, norms, sampling) is lighter still, and the AI CPU only runs the few operators that fall back to it.
Percentages are whole numbers, as npu-smi prints them.
"""

from __future__ import annotations

from dataclasses import dataclass

# The optional npu-smi readings each of the API's chips prints.
_READINGS: dict[str, frozenset[str]] = {
    "ascend910a": frozenset({"aicpu", "hbm_bandwidth"}),
    "ascend910b": frozenset({"aicube", "aivector", "aicpu", "hbm_bandwidth"}),
    "ascend910_93": frozenset({"aicube", "aivector", "aicpu", "hbm_bandwidth"}),
}
CHIPS = tuple(_READINGS)

# Shares of the AI Core load (see the module docstring).
_CUBE_SHARE = 0.55
_VECTOR_SHARE = 0.35
_AICPU_IDLE, _AICPU_SPAN = 0.01, 0.04
_BANDWIDTH_IDLE, _BANDWIDTH_SPAN = 0.05, 0.90


@dataclass(frozen=True)
class CoreReadings:
    """Per-core-type utilization and HBM bandwidth saturation, 0..1; ``None`` = the chip does not report it."""

    aicube: float | None = None
    aivector: float | None = None
    aicpu: float | None = None
    hbm_bandwidth: float | None = None


def core_readings(chip: str, utilization: float) -> CoreReadings:
    """What a ``chip`` whose AI Core is ``utilization`` busy reports; raises ValueError for an unknown chip."""
    if chip not in _READINGS:
        raise ValueError(f"unknown chip {chip!r}; use one of {', '.join(CHIPS)}")
    reported = _READINGS[chip]
    u = min(1.0, max(0.0, utilization))
    values = {
        "aicube": u * _CUBE_SHARE,
        "aivector": u * _VECTOR_SHARE,
        "aicpu": _AICPU_IDLE + _AICPU_SPAN * u,
        "hbm_bandwidth": min(1.0, _BANDWIDTH_IDLE + _BANDWIDTH_SPAN * u),
    }
    return CoreReadings(**{name: _percent(value) for name, value in values.items() if name in reported})


def _percent(ratio: float) -> float:
    """A ratio at npu-smi's resolution: a whole percentage."""
    return round(ratio * 100) / 100
