"""The KVTransfer condition over a real Prometheus scraping a real prefill/decode pair, and the transfer broken.

A prefill and a decode ``vllm serve`` of the tiny model (ExampleConnector over a shared directory) with llm-d's
P/D sidecar in front of the decode engine (:class:`~ascend_fleet_dev.real.disaggregation.Disaggregated`); a real
Prometheus scrapes both engines every second, labelled as the chart labels engine pods. A client sends fresh
prompts through the sidecar with the prefill engine named. The operator's own decision
(:func:`ascend_fleet.control.kvtransfer.kv_transfer_conditions`, what the control loop's hook decides with) over that Prometheus
must read ``True``; then the decode engine's KV directory is pointed at an empty one while everything runs:
requests keep being answered, and the decision must turn ``False`` with its sentence, and the decode engine's own
counter must show it computed the prompts itself. Without traffic it is ``Unknown``.

Skipped without ``make engine-vllm``, the sidecar's build or a ``prometheus`` binary; under ``CI=true`` that fails.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from ascend_fleet.status.kv_transfer import REASON_NO_TRAFFIC, REASON_NO_TRANSFER, REASON_TRANSFERRING
from ascend_fleet_dev.fleet.prometheus import PrometheusNotFound, PrometheusServer
from ascend_fleet_dev.real.disaggregation import SOURCE_COMPUTED, SOURCE_TRANSFERRED, Disaggregated
from ascend_fleet_dev.real.kvproof import KVSwitch, SteadyClient, condition, scrape_targets, wait_condition

from .support import vllm_cpu_or_skip
from .test_disaggregated_vllm import sidecar_or_skip

pytestmark = pytest.mark.timeout(1200)
# The test's window (the operator's is 120 s): short, so the test sees each state within a minute.
WINDOW = 15.0


def prometheus_or_skip() -> PrometheusServer:
    try:
        return PrometheusServer(scrape_interval="1s")
    except PrometheusNotFound as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have Prometheus: {error}")
        pytest.skip(str(error))


def test_kv_transfer_condition_goes_false_when_the_transfer_breaks():
    environment, binary = vllm_cpu_or_skip(), sidecar_or_skip()
    with (
        tempfile.TemporaryDirectory(prefix="ascend-fleet-kvswitch-") as root,
        prometheus_or_skip() as prometheus,
    ):
        switch = KVSwitch(Path(root))
        pd = Disaggregated(environment, sidecar_binary=binary, decode_directory=switch.link)
        assert pd.prefill.shared_directory is not None
        switch.point(pd.prefill.shared_directory)
        with pd:
            prometheus.set_targets(scrape_targets(pd))
            prometheus.wait_for_targets(2, timeout=30)
            before = condition(prometheus.url, WINDOW)
            assert before.status == "Unknown", before  # nothing sent yet: no traffic, or no increase yet
            traffic = SteadyClient(pd.url, pd.headers(), pause=1.0).start()
            try:
                seconds, moving = wait_condition(prometheus.url, WINDOW, "True", timeout=120)
                print(f"KVTransfer True after {seconds:.1f} s of traffic: {moving.message}")
                assert moving.reason == REASON_TRANSFERRING
                answered_before = traffic.answered
                decode_before = pd.decode.prompt_tokens()
                switch.cut()
                cut_at = time.monotonic()
                seconds, broken = wait_condition(prometheus.url, WINDOW, "False", timeout=WINDOW + 90)
                print(f"KVTransfer False {seconds:.1f} s after the cut: {broken.message}")
                decode_after = pd.decode.prompt_tokens()
            finally:
                traffic.stop()
            assert (
                broken.reason == REASON_NO_TRANSFER and "computed every prompt themselves" in broken.message
            )
            # Not before the window had nearly passed: a window without a transferred token is the evidence, and
            # the last transfer precedes the cut by at most the requests then in flight (one or two here).
            assert time.monotonic() - cut_at >= WINDOW / 2
            # Requests kept being answered: the broken transfer is invisible to clients, which is the point.
            assert traffic.failed == [], traffic.failed[:3]
            assert traffic.answered - answered_before >= 5, traffic.answered
            # The engine's own counter agrees: after the cut it computed prompts and loaded (almost) nothing;
            # a request in flight at the cut may still have loaded its blocks.
            computed = decode_after.get(SOURCE_COMPUTED, 0) - decode_before.get(SOURCE_COMPUTED, 0)
            loaded = decode_after.get(SOURCE_TRANSFERRED, 0) - decode_before.get(SOURCE_TRANSFERRED, 0)
            print(f"decode engine after the cut: {computed:.0f} prompt tokens computed, {loaded:.0f} loaded")
            assert computed > 1000 and loaded <= 256
            _, idle = wait_condition(prometheus.url, WINDOW, "Unknown", timeout=WINDOW + 60)
            assert idle.reason == REASON_NO_TRAFFIC, idle
