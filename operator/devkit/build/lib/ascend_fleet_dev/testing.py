"""Helpers for tests that talk to a Kubernetes API: clients, kubectl, polling and kopf in a thread.

Plain functions and context managers (no pytest here), so that any test package can build its own fixtures
on them (polling is :func:`ascend_fleet.kube.wait_for`). They work against a
:class:`~ascend_fleet_dev.cluster.DevCluster` or any server URL::

    with DevCluster(start_seconds=0.1) as cluster, kopf_operator(cluster.url, registry):
        core = kubernetes.client.CoreV1Api(api_client(cluster.url))
        wait_for(lambda: core.read_namespaced_pod("p", "default").status.phase == "Running")
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import kopf
import kubernetes.client

from ascend_fleet_dev.cluster import DevCluster

_T = TypeVar("_T")
KUBECTL = shutil.which("kubectl")


def api_client(url: str) -> kubernetes.client.ApiClient:
    """An official-client ``ApiClient`` for a server without authentication."""
    configuration = kubernetes.client.Configuration()
    configuration.host = url
    return kubernetes.client.ApiClient(configuration)


def kubectl(
    cluster: DevCluster, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run the machine's ``kubectl`` against ``cluster`` (with a discovery cache of its own).

    Raises RuntimeError if kubectl is not installed, CalledProcessError (with its output) if it fails.
    """
    if KUBECTL is None:
        raise RuntimeError("kubectl is not installed")
    if cluster.kubeconfig_path is None:
        raise RuntimeError("the cluster has no kubeconfig yet")
    cache = Path(cluster.kubeconfig_path).parent / "kubectl-cache"
    command = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig_path), "--cache-dir", str(cache), *args]
    result = subprocess.run(command, input=input, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, command, result.stdout, result.stderr)
    return result


@contextlib.contextmanager
def kopf_operator(
    url: str,
    registry: kopf.OperatorRegistry,
    *,
    settings: kopf.OperatorSettings | None = None,
    namespaces: Sequence[str] = (),
    startup_timeout: float = 10.0,
) -> Iterator[threading.Thread]:
    """Run ``kopf.operator`` for ``registry`` against ``url`` in a thread of its own, until the block ends.

    A login handler for the URL is added to the registry. Cluster-wide unless ``namespaces`` are given;
    always standalone (no peering). An exception that ended the operator is re-raised on exit.
    """
    kopf.on.login(registry=registry)(_login_to(url))
    stop_flag, ready_flag = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(
                kopf.operator(
                    registry=registry,
                    settings=settings,
                    clusterwide=not namespaces,
                    namespaces=namespaces,
                    standalone=True,
                    stop_flag=stop_flag,
                    ready_flag=ready_flag,
                )
            )
        except BaseException as e:  # reported to the test thread on exit
            failure.append(e)
        finally:
            ready_flag.set()

    thread = threading.Thread(target=run, name="kopf-operator", daemon=True)
    thread.start()
    if not ready_flag.wait(startup_timeout):
        raise TimeoutError("the kopf operator did not start in time")
    try:
        yield thread
    finally:
        stop_flag.set()
        thread.join(startup_timeout)
    if failure:
        raise RuntimeError("the kopf operator failed") from failure[0]


def _login_to(url: str) -> Callable[..., Any]:
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=url)

    return login
