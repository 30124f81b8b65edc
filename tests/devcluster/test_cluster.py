"""The dev cluster runner: start, kubeconfig, clean stop, and the ``serve_emulator`` entry point of the CLI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import kubernetes.client
import kubernetes.config
import pytest
import yaml

import ascend_fleet
from ascend_fleet.kube import wait_for
from ascend_fleet_dev.cluster import EMULATOR_CONTEXT, DevCluster
from ascend_fleet_dev.local.process import guarded_popen
from ascend_fleet_dev.testing import api_client

PACKAGE_ROOT = Path(ascend_fleet.__file__).resolve().parents[1]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def refuses_connections(port: int) -> bool:
    with socket.socket() as client:
        return client.connect_ex(("127.0.0.1", port)) != 0


def test_a_cluster_stops_without_leaving_a_thread_or_a_listening_socket():
    before = set(threading.enumerate())
    with DevCluster(start_seconds=0.05, ready_seconds=0.05) as cluster, api_client(cluster.url) as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_pod(
            "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
        )
        wait_for(
            lambda: core.read_namespaced_pod("p", "default").status.phase == "Running", what="a running pod"
        )
        kubeconfig = cluster.kubeconfig_path
        port = port_of(cluster.url)
    assert set(threading.enumerate()) <= before
    assert refuses_connections(port)
    assert kubeconfig is not None and not kubeconfig.exists()  # the temporary kubeconfig goes too


def test_the_kubeconfig_reaches_the_cluster_without_credentials(tmp_path):
    with DevCluster() as cluster:
        path = cluster.write_kubeconfig(tmp_path / "nested" / "config")
        assert cluster.kubeconfig_path == path
        config = yaml.safe_load(path.read_text())
        assert config["current-context"] == EMULATOR_CONTEXT
        assert config["clusters"] == [{"name": EMULATOR_CONTEXT, "cluster": {"server": cluster.url}}]
        assert config["users"] == [{"name": EMULATOR_CONTEXT, "user": {}}]
        client = kubernetes.config.new_client_from_config(config_file=str(path))
        with client:
            assert "default" in {
                ns.metadata.name for ns in kubernetes.client.CoreV1Api(client).list_namespace().items
            }


def test_call_runs_work_on_the_loop_that_owns_the_store():
    with DevCluster() as cluster:
        store = cluster.emulator.store
        assert cluster.call(lambda: store.read_object("v1/namespaces", "default"))["kind"] == "Namespace"

        async def revision() -> int:
            return store.revision

        assert cluster.call(revision()) >= 4  # the four namespaces every cluster starts with
    with pytest.raises(RuntimeError, match="not running"):
        cluster.call(lambda: None)


def test_a_port_in_use_fails_the_start():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(RuntimeError, match="failed to start"):
            DevCluster(port=taken.getsockname()[1]).start()


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_serve_runs_until_a_signal_and_prints_how_to_connect(tmp_path, stop_signal):
    kubeconfig = tmp_path / "kubeconfig"
    code = (
        "from ascend_fleet_dev.serve import serve_emulator; "
        f"serve_emulator(host='127.0.0.1', port=0, kubeconfig={str(kubeconfig)!r}, "
        "start_seconds=0.1, ready_seconds=0.1)"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")])),
    }
    process = guarded_popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        url_line, export_line = process.stdout.readline(), process.stdout.readline()
        assert export_line.strip() == f"export KUBECONFIG={kubeconfig}"
        url = url_line.split()[-1]
        with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as client:
            assert kubernetes.client.CoreV1Api(client).read_namespace("default").status.phase == "Active"
        process.send_signal(stop_signal)
        assert process.wait(timeout=15) == 0, process.stderr.read()
        assert refuses_connections(port_of(url))
    finally:
        process.kill()
        process.wait()
