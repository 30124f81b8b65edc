"""The operator under a real API server that goes away: it backs off, comes back, and loses no action.

The API server is stopped for longer than kopf's whole retry sequence used to last (18 s), then started again;
its watch cache starts empty, so watches resumed from an older resourceVersion are answered with
``410 Gone`` (an ERROR event), which the operator must take as "list again", not as a reason to exit.
"""

from __future__ import annotations

import logging
import time

import pytest

from ascend_fleet.kube import wait_for
from tests.e2e.fleet import example

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 25.0


@pytest.fixture
def control_plane(cluster):
    if cluster is None or not hasattr(cluster, "cluster"):
        pytest.skip("restarts the real control plane's API server")
    return cluster.cluster.control_plane


def test_operator_survives_an_api_server_outage_and_a_410_on_resume(fleet, operator, control_plane, caplog):
    caplog.set_level(logging.DEBUG, logger="kopf")
    fleet.apply(example("sglang-small.yaml", disruption={"maxUnavailable": 1, "drainSeconds": 0}))
    fleet.wait_ready("qwen-1-5b", 1, timeout=40)

    control_plane.stop_apiserver()
    time.sleep(OUTAGE_SECONDS)
    control_plane.start_apiserver()

    # A change made once the API is back is acted on: the operator is alive and watching again.
    wait_for(lambda: fleet.scale("qwen-1-5b", 2), 30, "the scale subresource answering")
    fleet.wait_ready("qwen-1-5b", 2, timeout=90)
    assert operator.thread is not None and operator.thread.error is None
    assert operator.thread.is_alive(), "the operator exited during the outage"
    # The outage was real (requests failed and were retried) and the resumed watches met 410 Gone.
    messages = [record.getMessage() for record in caplog.records]
    assert any("will retry" in m or "Restarting the watch-stream" in m for m in messages)
    assert any("Restarting the watch-stream" in m for m in messages), "no watch was answered 410 Gone"
