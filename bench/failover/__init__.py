"""Failover benches: how long a dual-active inference takes traffic off a dead node, against the floor.

What every run of them shares: the example they apply, the namespace it goes into, and how a time is printed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import yaml

from ascend_fleet.api.crd import crd
from ascend_fleet.kube import Kube, wait_for
from ascend_fleet_dev.real.realcluster import provide_model_claim
from ascend_fleet_dev.stack import stack

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


def node_death_stack(grace: int) -> AbstractContextManager[Any]:
    """The real control plane a node-death run uses: three 16-NPU nodes, quick simulated engines, the node
    controller at ``grace`` seconds."""
    return stack(
        real=True,
        nodes=3,
        npus_per_node=16,
        start_seconds=0.2,
        ready_seconds=0.3,
        node_monitor_grace_seconds=grace,
        crds=[crd()],
    )
