"""Rendered vllm-ascend pods and the cached vLLM CPU environment, for the real-engine tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.api.crd import crd
from ascend_fleet.handlers.operator import OperatorContext, OperatorThread, RunOptions
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable, ensure_picker
from ascend_fleet_dev.real.localpods import LocalPods, install_inference_extension
from ascend_fleet_dev.real.realcluster import RealCluster, provide_model_claim
from ascend_fleet_dev.real.vllm_env import VllmCpu, expected_environment, find_environment
from ascend_fleet_dev.stack import Stack, stack
from tests.e2e.conftest import fast_settings
from tests.support.paths import EXAMPLES, ROOT
from tests.support.realcluster import control_plane_or_skip, wait_for_service_account

# What the kubelet would put into the fieldRef variables.
FIELD_VALUES = {"metadata.name": "llm-0", "metadata.namespace": "default", "status.podIP": "127.0.0.1"}


def render(paths: list[str] | None = None, text: str | None = None) -> list[dict]:
    """Objects as ``ascend-fleet render`` prints them (the command itself, not the library)."""
    result = subprocess.run(
        [sys.executable, "-m", "ascend_fleet.cli.main", "render", *(paths or ["-"])],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def engine_container(pod: dict) -> dict:
    """The pod's ``engine`` container."""
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


@cache
def example_vllm_pods() -> tuple[tuple[str, dict], ...]:
    """``(example/pod name, pod)`` for every vllm-ascend engine pod the examples render."""
    example = {
        doc["metadata"]["name"]: path.stem
        for path in EXAMPLES
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    }
    found = []
    for obj in render([str(path) for path in EXAMPLES]):  # one render: each call imports the whole CLI
        if obj["kind"] == "Pod" and "vllm" in " ".join(engine_container(obj)["command"]):
            owner = obj["metadata"]["labels"][names.LABEL_NAME]
            found.append((f"{example[owner]}/{obj['metadata']['name']}", obj))
    return tuple(found)


def vllm_cpu_or_skip() -> VllmCpu:
    """The built environment; a skip naming ``make engine-vllm`` on a developer machine, a failure in CI."""
    found = find_environment()
    if found is not None:
        return found
    reason = f"vLLM's CPU environment is not built ({expected_environment().root}): run make engine-vllm"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@contextmanager
def real_vllm_stack(namespace: str, *, prometheus: bool = False, limit: int | None = None) -> Iterator[Stack]:
    """The real control plane whose vllm-ascend engine pods run as real ``vllm serve`` processes of the tiny
    model (at most ``limit`` at once), with the CRD, ``namespace`` ready for pods (its ServiceAccount and the
    model claim) and, with ``prometheus``, a real Prometheus scraping them: where every real-engine fleet test
    starts. A skip (in CI a failure) without the control plane or the vLLM environment."""
    control_plane_or_skip()
    vllm_cpu_or_skip()
    with stack(
        real=True,
        nodes=1,
        start_seconds=0.2,
        ready_seconds=0.3,
        crds=[crd()],
        prometheus=prometheus,
        scenario=Scenario.constant(0.0),  # simulated engines (SGLang pods) write their own empty target group
        engines="vllm",
        real_engine_limit=limit,
    ) as local:
        assert isinstance(local.cluster, RealCluster) and local.real_engines is not None
        wait_for_service_account(local.kube, namespace)
        provide_model_claim(local.kube, namespace)
        yield local


def picker_or_skip() -> None:
    """The endpoint picker build; a skip on a developer machine without it, a failure in CI."""
    try:
        ensure_picker()
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the endpoint picker: {error}")
        pytest.skip(str(error))


@contextmanager
def routed_vllm_stack(
    namespace: str, *, prometheus: bool = False, limit: int | None = None
) -> Iterator[tuple[Stack, LocalPods]]:
    """:func:`real_vllm_stack` with the Inference Extension's CRDs, the operator running and the picker pods
    (each pool's gateway with them) run here: where every routed real-engine fleet test starts."""
    picker_or_skip()
    with real_vllm_stack(namespace, prometheus=prometheus, limit=limit) as local:
        install_inference_extension(local.kube)
        assert isinstance(local.cluster, RealCluster)
        with (
            LocalPods(local.kube, local.cluster.control_plane) as pickers,
            OperatorThread(OperatorContext(fast_settings(), local.kube), RunOptions()),
        ):
            local.cluster.kubelet.add_listener(pickers)
            try:
                yield local, pickers
            finally:
                local.cluster.kubelet.remove_listener(pickers)
