"""Engine pods as the simulator reads them from their manifests: identity, engine, ports, devices, start.

:func:`engine_pod` turns a pod object into an :class:`EnginePod` (``None`` for a pod that runs no engine);
the simulated engines serve what it says, and Prometheus scrapes each at :func:`scrape_target`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ascend_fleet.api.names import (
    LABEL_APP_COMPONENT,
    LABEL_NAME,
    LABEL_PD_ROLE,
    LABEL_RANK,
    LABEL_REPLICA,
    LABEL_ROLE,
    ROLE_LEADER,
    ROLE_WORKER,
)
from ascend_fleet.render import EXPORTER_PORT
from ascend_fleet.render.pdsidecar import PD_SIDECAR_CONTAINER
from ascend_fleet.render.routing import PICKER_COMPONENT
from ascend_fleet_dev.fleet.prometheus import Target
from ascend_fleet_dev.fleet.serving import (
    DEFAULT_ENGINE,
    EngineConfig,
    command_words,
    engine_config,
    imitated_engines,
)

METRICS_PORT_NAME = "npu-metrics"
NPU_RESOURCE_PREFIX = "huawei.com/"
SIDECAR_PORT_NAME = "http"  # the P/D sidecar's container port (render/pdsidecar.py)
FALLBACK_HOST = "127.0.0.1"  # where a pod without an IP of its own is served


@dataclass(frozen=True)
class EnginePod:
    """What the simulator needs to know about one engine pod, read from its manifest."""

    namespace: str
    name: str
    uid: str
    inference: str
    replica: int
    rank: int
    role: str
    engine: str
    model_name: str
    devices: int
    ip: str
    port: int
    started_at: float
    argv: tuple[str, ...] = ()
    api_port: int | None = None
    npu_only: bool = False  # a real engine serves this pod: here only its NPU series (the exporter's part)
    pd_role: str | None = None  # prefill or decode in a two-role fleet (spec.disaggregation)

    @property
    def key(self) -> tuple[str, str]:
        """The pod's identity while it runs: namespace and name."""
        return self.namespace, self.name

    @property
    def leader(self) -> bool:
        """Rank 0 runs the engine's HTTP server and its queue metrics."""
        return self.rank == 0

    @property
    def address(self) -> str:
        """``host:port`` of the pod's metrics endpoint."""
        return f"{self.ip}:{self.port}"

    @property
    def api_address(self) -> str | None:
        """``host:port`` of the leader's OpenAI API, or ``None`` for a pod that serves none."""
        return f"{self.ip}:{self.api_port}" if self.api_port else None

    def engine_config(self) -> EngineConfig:
        """The simulated engine's settings, read from the pod's command line."""
        return engine_config(self.argv, engine=self.engine, default_model=self.model_name)


# Reading pods ---------------------------------------------------------------------------------


def engine_pod(pod: Mapping[str, Any], now: float) -> EnginePod | None:
    """The engine pod described by a Kubernetes pod object, or ``None`` if it is not an engine pod."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    inference = labels.get(LABEL_NAME)
    # The endpoint picker's pods carry the inference's name too, but run no engine.
    if not inference or labels.get(LABEL_APP_COMPONENT) == PICKER_COMPONENT:
        return None
    rank = _int_label(labels, LABEL_RANK)
    return EnginePod(
        namespace=metadata.get("namespace") or "default",
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        inference=inference,
        replica=_int_label(labels, LABEL_REPLICA),
        rank=rank,
        role=labels.get(LABEL_ROLE) or (ROLE_LEADER if rank == 0 else ROLE_WORKER),
        pd_role=labels.get(LABEL_PD_ROLE),
        engine=detect_engine(pod),
        model_name=served_model_name(pod, default=inference),
        devices=npu_count(pod),
        ip=(pod.get("status") or {}).get("podIP") or FALLBACK_HOST,
        port=metrics_port(pod),
        started_at=pod_start_time(pod, default=now),
        argv=tuple(_command_words(pod)),
        api_port=api_port(pod) if rank == 0 else None,
    )


def detect_engine(pod: Mapping[str, Any]) -> str:
    """The command word of the imitated engine a container's command or args mention, else the default's.

    The default (vLLM) is the fallback because vLLM workers of a multi-pod replica only run ``ray start``.
    """
    words = " ".join(_command_words(pod)).lower()
    others = [facts.dialect.command_word for facts in imitated_engines() if facts.dialect is not None]
    return next((word for word in others if word != DEFAULT_ENGINE and word in words), DEFAULT_ENGINE)


def served_model_name(pod: Mapping[str, Any], *, default: str) -> str:
    """The ``--served-model-name`` the engine was started with, or ``default``."""
    words = _command_words(pod)
    for index, word in enumerate(words):
        if word == "--served-model-name" and index + 1 < len(words):
            return words[index + 1]
        if word.startswith("--served-model-name="):
            return word.split("=", 1)[1]
    return default


def npu_count(pod: Mapping[str, Any]) -> int:
    """NPUs the pod asked for: the sum of its ``huawei.com/*`` limits (or requests), at least 1."""
    total = 0
    for container in _containers(pod):
        resources = container.get("resources") or {}
        amounts = resources.get("limits") or resources.get("requests") or {}
        total += sum(int(value) for name, value in amounts.items() if name.startswith(NPU_RESOURCE_PREFIX))
    return max(1, total)


def metrics_port(pod: Mapping[str, Any]) -> int:
    """The container port named ``npu-metrics``, else the exporter's default port."""
    for container in _containers(pod):
        for port in container.get("ports") or []:
            if port.get("name") == METRICS_PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return EXPORTER_PORT


def api_port(pod: Mapping[str, Any]) -> int | None:
    """The engine's ``--port`` (its OpenAI API), or ``None`` when the command line names none.

    A decode leader with llm-d's P/D sidecar (a routed two-role fleet) takes requests on the sidecar's port,
    the one its InferencePool targets, and the sidecar hands them to the engine: the simulated engine answers
    there, standing in for both (it does not ask the prefill pod the picker's header names)."""
    sidecar = named_container(pod, PD_SIDECAR_CONTAINER)
    for port in (sidecar or {}).get("ports") or []:
        if port.get("name") == SIDECAR_PORT_NAME and port.get("containerPort"):
            return int(port["containerPort"])
    return engine_config(_command_words(pod), engine=detect_engine(pod), default_model="").port


def pod_start_time(pod: Mapping[str, Any], *, default: float) -> float:
    """``status.startTime`` as a Unix time, or ``default`` when the pod has none."""
    started = (pod.get("status") or {}).get("startTime")
    if not started:
        return default
    try:
        return datetime.fromisoformat(str(started)).timestamp()
    except ValueError:
        return default


def ready_replicas(pods: Iterable[EnginePod], namespace: str, inference: str) -> int:
    """Replicas of an inference whose leader pod runs: they share the inference's demand."""
    return len(
        {
            pod.replica
            for pod in pods
            if pod.leader and (pod.namespace, pod.inference) == (namespace, inference)
        }
    )


def scrape_target(pod: EnginePod) -> Target:
    """The Prometheus target of a pod, with the labels the operator's metric catalog groups by."""
    labels = {
        "namespace": pod.namespace,
        "inference": pod.inference,
        "replica": str(pod.replica),
        "rank": str(pod.rank),
        "pod": pod.name,
    }
    if pod.pd_role:
        labels["pd_role"] = pod.pd_role  # as the chart's PodMonitor copies the pod's role
    return Target(pod.address, labels)


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def named_container(pod: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The pod's container ``name``, or None."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return next((c for c in containers if c.get("name") == name), None)


def _command_words(pod: Mapping[str, Any]) -> list[str]:
    """Command and args of all containers, with shell scripts (``bash -c "..."``) split into words."""
    words = []
    for container in _containers(pod):
        words += command_words([*(container.get("command") or []), *(container.get("args") or [])])
    return words


def _int_label(labels: Mapping[str, str], key: str) -> int:
    try:
        return int(labels.get(key, 0))
    except ValueError:
        return 0
