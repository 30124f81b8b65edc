"""Failover benches: how long a dual-active inference takes traffic off a dead node, against the floor.

What every run of them shares: the example they apply, the namespace it goes into, and how a time is printed.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ascend_fleet.kube import Kube, wait_for
from ascend_fleet_dev.real.realcluster import provide_model_claim

NAME = "qwen-1-5b"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sglang-small.yaml"


def example(namespace: str) -> dict:
    """The small SGLang example (``NAME``), placed in ``namespace``."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def prepare_namespace(kube: Kube, namespace: str) -> None:
    """The namespace, its default ServiceAccount (pods are refused without it) and the model claim."""
    kube.create_namespace(namespace)
    wait_for(lambda: kube.get("ServiceAccount", namespace, "default"), 60, "the default ServiceAccount")
    provide_model_claim(kube, namespace)


def seconds(value: float | None) -> str:
    """A measured time as printed, or "not seen" when it did not happen within the timeout."""
    return "not seen" if value is None else f"{value:.1f} s"
