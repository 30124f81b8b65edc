"""The picker classifies: requests without an objective header get their class from their prompt length.

On the real control plane, as tests/routing/test_dataplane.py: the upstream CRDs and every rendered object
are applied, the node agent serves the engine pods as simulated engines, and Envoy calls the project's picker
(tools/epp) alone, with the command line and EndpointPickerConfig the operator renders for a fleet with classes:
the classifier runs in front of the picker in its own process (tools/epp/front), as in a user's cluster, where
the gateway calls the picker's Service and nothing else. The picker's own request counter, labelled by the
priority of the objective it resolved, shows where each request went.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
import uuid

import aiohttp
import pytest
import yaml

from ascend_fleet.api import names
from ascend_fleet.kube import wait_for
from ascend_fleet.render import Owner, render_all, validate
from ascend_fleet.render.picker_config import OBJECTIVE_HEADER
from ascend_fleet.render.routing import CLASSIFY_FLAG, CLASSIFY_PICKER_PORT_FLAG, picker_name, render_routing
from ascend_fleet_dev.fleet.engines import SimulatedEngines
from ascend_fleet_dev.fleet.scenario import Scenario
from ascend_fleet_dev.local.ports import free_port
from ascend_fleet_dev.real.argv import replace_flag
from ascend_fleet_dev.real.dataplane import (
    Envoy,
    Picker,
)
from ascend_fleet_dev.real.poolendpoints import PoolRef
from tests.routing.test_dataplane import binaries, pool_namespace  # noqa: F401 (binaries: a fixture)

pytestmark = pytest.mark.e2e
NAME = "llm"
REQUESTS = re.compile(r"^inference_objective_request_total\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def fleet(real_cluster, binaries, tmp_path_factory):  # noqa: F811 (binaries is the imported fixture)
    """The seeds' default classes with engine priority; (url, picker)."""
    namespace = pool_namespace(real_cluster, "classify")
    engines = SimulatedEngines(Scenario.constant(0.0))
    real_cluster.kubelet.add_listener(engines)
    processes: list = []
    try:
        obj = validate({
            "apiVersion": names.API_VERSION, "kind": names.KIND,
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {"model": {"name": "qwen", "path": "/models/qwen"}, "engine": {"type": "vllm-ascend"},
                     "routing": {"mode": "inferencePool"}, "scheduling": {"priority": True}},
        }).obj  # fmt: skip
        objects = render_all(obj)
        real_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        leaders = [o["metadata"]["name"] for o in objects
                   if o["kind"] == "Pod" and o["metadata"]["labels"][names.LABEL_ROLE] == names.ROLE_LEADER]  # fmt: skip
        wait_for(lambda: all(engines.api_endpoint(namespace, n) for n in leaders), 60, "serving engines", 0.2)
        token = real_cluster.kubectl("create", "token", picker_name(NAME), "-n", namespace).stdout.strip()
        kubeconfig = real_cluster.cluster.control_plane.write_kubeconfig(
            tmp_path_factory.mktemp("epp") / "kubeconfig", token=token, namespace=namespace
        )
        args, config = rendered_picker(obj)
        assert CLASSIFY_FLAG in args, "the operator renders the classifier for a fleet with classes"
        # The pod's ports, moved to free ones for a local process (the front's, the picker's behind it).
        for name in ("--grpc-port", "--grpc-health-port", "--metrics-port", CLASSIFY_PICKER_PORT_FLAG):
            args = replace_flag(args, name, str(free_port()))
        picker = Picker(args, config, kubeconfig, binary=binaries[0])
        processes.append(picker.start())
        pool = PoolRef(real_cluster.kube, namespace, NAME)
        envoy = Envoy(picker_port=picker.grpc_port, pool=pool, fallbacks=picker.fallbacks)
        processes.append(envoy.start())
        try:
            wait_for(lambda: complete(envoy.url, 4)[0] == 200, 90, "an answer through the picker", 0.2)
        except AssertionError:
            raise AssertionError(
                f"no answer\nEPP:\n{picker.log()[-4000:]}\nEnvoy:\n{envoy.log()[-2000:]}"
            ) from None
        yield envoy.url, picker
    finally:
        for process in reversed(processes):
            process.stop()
        real_cluster.kubelet.remove_listener(engines)
        engines.close()
        real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def rendered_picker(obj) -> tuple[list[str], dict]:
    """The picker container's args and its EndpointPickerConfig, as the operator renders them."""
    objects = render_routing(obj.spec, Owner.of(obj))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["args"], yaml.safe_load(config_map["data"]["epp.yaml"])


def complete(url: str, words: int, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """(status, body) of one completion whose prompt is ``words`` words long."""

    async def send():
        prompt = " ".join([uuid.uuid4().hex, *["word"] * (words - 1)])
        body = {"model": "qwen", "prompt": prompt, "max_tokens": 2}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
            session.post(url + "/v1/completions", json=body, headers=headers or {}) as response,
        ):
            return response.status, await response.text()

    try:
        return asyncio.run(send())
    except (TimeoutError, aiohttp.ClientError) as error:
        return 599, str(error)


def requests_by_priority(picker: Picker) -> dict[str, float]:
    """The picker's ``inference_objective_request_total``, summed per ``priority`` label."""
    with urllib.request.urlopen(f"http://127.0.0.1:{picker.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for labels, value in REQUESTS.findall(text):
        priority = dict(re.findall(r'(\w+)="([^"]*)"', labels)).get("priority", "")
        counts[priority] = counts.get(priority, 0.0) + float(value)
    return counts


def sent_one(picker: Picker, before: dict[str, float]) -> dict[str, float]:
    """What one request added to the picker's counts, once it shows."""
    return wait_for(
        lambda: {p: n - before.get(p, 0.0) for p, n in requests_by_priority(picker).items()
                 if n != before.get(p, 0.0)},
        10, "the picker's request counter", 0.2,
    )  # fmt: skip


def test_prompts_without_a_header_are_classed_by_length(fleet):
    """3000 words is the long class (priority 0), 600 medium (1), 10 short (2): the seeds' thresholds."""
    url, picker = fleet
    for words, priority in ((3000, "0"), (600, "1"), (10, "2")):
        before = requests_by_priority(picker)
        status, body = complete(url, words)
        assert status == 200, body
        assert sent_one(picker, before) == {priority: 1.0}, (words, picker.log()[-3000:])
    # The classifier's own account: each prompt's estimated tokens (max of words and characters / 4).
    classified = [json.loads(line) for line in picker.log().splitlines() if "classified request" in line]
    estimates = {entry["objective"]: entry["promptTokens"] for entry in classified}
    assert estimates["llm-long"] >= 3000 and 600 <= estimates["llm-medium"] <= 2048, estimates


def test_a_header_the_client_sends_still_wins(fleet):
    url, picker = fleet
    before = requests_by_priority(picker)
    status, body = complete(url, 3000, {OBJECTIVE_HEADER: f"{NAME}-short"})
    assert status == 200, body
    assert sent_one(picker, before) == {"2": 1.0}
