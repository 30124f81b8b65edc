"""The real dev cluster survives what it is used to test: a killed API server and an API outage.

A kube-apiserver killed with SIGKILL is reaped (no zombie left in /proc) and started again by the control
plane's supervisor, serving on the same port. After an API outage the node agent resumes its heartbeats and,
as a kubelet's status manager does, writes its pods' status again where the API's copy differs: the node
lifecycle controller marks the pods of a node it lost NotReady (here after its 90 s grace period, longer than
this test's outage, so the test marks them as the controller would), and the fleet is Ready again afterwards.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from ascend_fleet.kube import scaled, wait_for
from tests.support.procfs import process_state

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 20.0


@pytest.fixture
def real(cluster):
    if cluster is None or not hasattr(cluster, "cluster"):
        pytest.skip("kills and stops the real control plane's components")
    return cluster.cluster


def _serving(real) -> bool:
    status, body = real.control_plane.request("/readyz", timeout=2.0)
    return status == 200 and body.strip() == b"ok"


def test_a_killed_api_server_is_reaped_and_restarted_serving(real, kube):
    control_plane = real.control_plane
    killed = control_plane.pid("kube-apiserver")
    restarts = control_plane.restarts("kube-apiserver")
    assert killed is not None and process_state(killed) not in (None, "Z")

    os.kill(killed, signal.SIGKILL)
    wait_for(
        lambda: control_plane.pid("kube-apiserver") != killed and _serving(real),
        60,
        "kube-apiserver restarted and ready",
        interval=0.2,
    )
    assert process_state(killed) is None, f"the killed kube-apiserver {killed} was left in /proc"
    assert control_plane.restarts("kube-apiserver") == restarts + 1
    assert control_plane.supervisor.exits("kube-apiserver")[-1] == -signal.SIGKILL
    # Serving objects again, from the same etcd: what was there is still there.
    wait_for(lambda: kube.get("Namespace", None, "default"), 30, "the default namespace")


def test_an_etcd_outage_is_survived_and_the_api_answers_again(real, kube):
    with real.control_plane.outage("etcd"):
        time.sleep(scaled(5.0))
        assert not _serving(real)  # the API server reports it cannot reach its storage
    assert _serving(real)
    wait_for(lambda: kube.get("Namespace", None, "default"), 30, "the default namespace")
    assert real.control_plane.pid("etcd") is not None and real.control_plane.running("etcd")
