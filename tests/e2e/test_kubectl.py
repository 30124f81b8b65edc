"""As a user would: `ascend-fleet dev-cluster --real`, `ascend-fleet run`, and kubectl against them.

The cluster is the real control plane (the emulator with ``ASCEND_FLEET_E2E_BACKEND=emulator``), so
``kubectl apply`` runs with its default validation: the server's schema and strict field validation.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ascend_fleet.kube import scaled, wait_for
from ascend_fleet_dev.local.process import guarded_popen
from tests.e2e.conftest import BACKEND
from tests.support.paths import ROOT
from tests.support.realcluster import control_plane_or_skip

REAL = BACKEND == "real"

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")]


def start(*args, env=None) -> subprocess.Popen:
    return guarded_popen(
        [sys.executable, "-m", "ascend_fleet.cli.main", *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )


def stop(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.stdout.read() if process.stdout else ""


@pytest.fixture
def dev_cluster(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    if REAL:
        control_plane_or_skip()
    process = start(
        "dev-cluster",
        *(["--real"] if REAL else []),
        "--kubeconfig",
        str(kubeconfig),
        "--pod-start-seconds",
        "0.2",
        "--pod-ready-seconds",
        "0.2",
    )
    line = ""
    deadline = time.monotonic() + scaled(120)
    while "export KUBECONFIG=" not in line and time.monotonic() < deadline:
        line = process.stdout.readline()
    assert f"export KUBECONFIG={kubeconfig}" in line, stop(process)
    yield kubeconfig
    stop(process)
    assert process.returncode == 0


def kubectl(kubeconfig, *args, input: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        input=input,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kubectl_apply_get_and_scale_against_the_dev_cluster(dev_cluster):
    env = {**os.environ, "KUBECONFIG": str(dev_cluster)}  # `run` honours KUBECONFIG
    operator = start("run", "--health-port", "0", "--metrics-port", "0", env=env)
    try:
        validation = [] if REAL else ["--validate=false"]  # the emulator serves no OpenAPI schema
        kubectl(dev_cluster, "apply", *validation, "-f", "crds/")
        if REAL:
            kubectl(dev_cluster, "wait", "--for=condition=Established", "-f", "crds/")
        kubectl(dev_cluster, "apply", *validation, "-f", "examples/sglang-small.yaml")
        wait_for(
            lambda: "qwen-1-5b-0" in kubectl(dev_cluster, "get", "pods", "-o", "name"), 90, "the engine pod"
        )
        table = wait_for(
            lambda: (
                (out := kubectl(dev_cluster, "get", "ainf"))
                and out.split("\n")[1].split()[5:6] == ["1"]
                and out
            ),
            30,
            "READY-REPLICAS 1 in kubectl get ainf",
        )
        header, row = table.splitlines()[:2]
        columns = "NAME ENGINE TP PP REPLICAS READY-REPLICAS NPUS READY REASON KV-TRANSFER AGE"
        assert header.split() == columns.split()
        assert row.split()[:7] == ["qwen-1-5b", "sglang", "2", "1", "1", "1", "2"]

        kubectl(dev_cluster, "scale", "ainf/qwen-1-5b", "--replicas=2")
        wait_for(
            lambda: (
                kubectl(dev_cluster, "get", "pods", "-o", "name").split()
                == ["pod/qwen-1-5b-0", "pod/qwen-1-5b-1"]
            ),
            30,
            "two engine pods",
        )
        described = kubectl(dev_cluster, "get", "ainf", "qwen-1-5b", "-o", "jsonpath={.status.replicas}")
        wait_for(
            lambda: (
                kubectl(dev_cluster, "get", "ainf", "qwen-1-5b", "-o", "jsonpath={.status.readyReplicas}")
                == "2"
            ),
            30,
            "two ready replicas",
        )
        assert described in {"1", "2"}
    except BaseException as failure:
        failure.add_note("the operator's output:\n" + stop(operator)[-3000:])  # what it did meanwhile
        raise
    output = stop(operator)
    assert "Traceback" not in output, output[-3000:]
