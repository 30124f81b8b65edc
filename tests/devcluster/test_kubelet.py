"""The kubelet simulator: pod lifecycle, loopback pod IPs, test controls and pod listeners."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterator

import kubernetes.client
import kubernetes.watch
import pytest
from kubernetes.client.exceptions import ApiException

from ascend_fleet.kube import wait_for
from ascend_fleet.observed import pod_ready
from ascend_fleet_dev.cluster import DevCluster
from ascend_fleet_dev.testing import api_client


class Recorder:
    """A pod listener that records the calls for pods of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.calls: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()

    def _record(self, hook: str, pod: dict) -> None:
        if pod["metadata"]["namespace"] == self.namespace:
            with self._lock:
                self.calls.append((hook, pod["metadata"]["name"], pod["status"].get("podIP")))

    def on_pod_running(self, pod: dict) -> None:
        self._record("running", pod)

    def on_pod_stopped(self, pod: dict) -> None:
        self._record("stopped", pod)


class AsyncRecorder(Recorder):
    async def on_pod_running(self, pod: dict) -> None:
        self._record("running", pod)


class Broken:
    def on_pod_running(self, pod: dict) -> None:
        raise RuntimeError("a listener bug")

    async def on_pod_stopped(self, pod: dict) -> None:
        raise RuntimeError("another listener bug")


@pytest.fixture()
def recorder(dev_cluster: DevCluster, test_namespace: str) -> Iterator[Recorder]:
    listener = Recorder(test_namespace)
    dev_cluster.kubelet.add_listener(listener)
    yield listener
    dev_cluster.kubelet.remove_listener(listener)


def pod_manifest(name: str, **spec: object) -> dict:
    containers = [{"name": "engine", "image": "engine:1"}, {"name": "sidecar", "image": "exporter:1"}]
    return {"metadata": {"name": name}, "spec": {"containers": containers, **spec}}


def ready(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> bool:
    pod = core.read_namespaced_pod(name, namespace)
    return pod_ready(core.api_client.sanitize_for_serialization(pod))


def wait_ready(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> None:
    wait_for(lambda: ready(core, namespace, name), what=f"pod {name} to be Ready")


def test_a_pod_goes_pending_then_running_then_ready():
    with DevCluster(start_seconds=0.3, ready_seconds=0.3) as cluster, api_client(cluster.url) as client:
        core = kubernetes.client.CoreV1Api(client)
        began = time.monotonic()
        created = core.create_namespaced_pod("default", pod_manifest("p"))
        assert created.status.phase == "Pending"
        states, timings = [], {}
        watch = kubernetes.watch.Watch()
        stream = watch.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=created.metadata.resource_version,
            timeout_seconds=5,
        )
        for event in stream:
            status = event["object"].status
            state = (status.phase, ready(core, "default", "p"))
            if state not in states:
                states.append(state)
                timings[state] = time.monotonic() - began
            if state == ("Running", True):
                watch.stop()
        assert states == [("Pending", False), ("Running", False), ("Running", True)]
        assert timings[("Running", False)] >= 0.3 and timings[("Running", True)] >= 0.6
        pod = core.read_namespaced_pod("p", "default")
        assert pod.spec.node_name.startswith("sim-node-")
        assert (pod.status.host_ip, pod.status.pod_ips[0].ip) == ("127.0.0.1", pod.status.pod_ip)
        assert pod.status.start_time is not None
        assert {c.type: c.status for c in pod.status.conditions} == {
            "PodScheduled": "True",
            "Initialized": "True",
            "ContainersReady": "True",
            "Ready": "True",
        }
        for container in pod.status.container_statuses:
            assert (container.ready, container.started, container.restart_count) == (True, True, 0)
            assert container.state.running.started_at is not None


def test_pods_get_unique_loopback_ips_one_can_bind_to(core, test_namespace):
    for index in range(4):
        core.create_namespaced_pod(test_namespace, pod_manifest(f"p{index}"))
    pods = wait_for(
        lambda: (
            [p for p in core.list_namespaced_pod(test_namespace).items if p.status.pod_ip]
            if all(p.status.phase == "Running" for p in core.list_namespaced_pod(test_namespace).items)
            else None
        ),
        what="all pods running",
    )
    ips = [pod.status.pod_ip for pod in pods]
    assert len(ips) == 4 and len(set(ips)) == 4
    for ip in ips:
        assert ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/8")
        with socket.socket() as server:
            server.bind((ip, 0))  # Linux routes all of 127/8 to lo: a simulated engine can serve here


def test_a_pod_keeps_the_node_it_names(core, test_namespace):
    core.create_namespaced_pod(test_namespace, pod_manifest("p", nodeName="sim-node-3"))
    wait_ready(core, test_namespace, "p")
    assert core.read_namespaced_pod("p", test_namespace).spec.node_name == "sim-node-3"


def test_listeners_hear_of_running_pods_with_their_ip_and_of_deleted_ones(core, recorder, test_namespace):
    core.create_namespaced_pod(test_namespace, pod_manifest("p"))
    wait_for(lambda: recorder.calls, what="on_pod_running")
    ip = core.read_namespaced_pod("p", test_namespace).status.pod_ip
    assert recorder.calls == [("running", "p", ip)]
    core.delete_namespaced_pod("p", test_namespace)
    wait_for(lambda: len(recorder.calls) == 2, what="on_pod_stopped")
    assert recorder.calls[1][:2] == ("stopped", "p")


def test_crash_puts_a_container_into_crash_loop_back_off(dev_cluster, core, test_namespace):
    core.create_namespaced_pod(test_namespace, pod_manifest("p"))
    wait_ready(core, test_namespace, "p")
    dev_cluster.kubelet.crash(test_namespace, "p", container="engine")
    pod = core.read_namespaced_pod("p", test_namespace)
    assert pod.status.phase == "Running" and not ready(core, test_namespace, "p")
    statuses = {c.name: c for c in pod.status.container_statuses}
    engine, sidecar = statuses["engine"], statuses["sidecar"]
    assert (engine.restart_count, engine.ready, engine.state.waiting.reason) == (1, False, "CrashLoopBackOff")
    assert engine.last_state.terminated.exit_code == 1
    assert (sidecar.restart_count, sidecar.ready) == (0, True)
    dev_cluster.kubelet.crash(test_namespace, "p")
    restarts = [
        c.restart_count for c in core.read_namespaced_pod("p", test_namespace).status.container_statuses
    ]
    assert restarts == [2, 1]


def test_fail_turns_a_pod_failed(dev_cluster, core, recorder, test_namespace):
    core.create_namespaced_pod(test_namespace, pod_manifest("p"))
    wait_ready(core, test_namespace, "p")
    dev_cluster.kubelet.fail(test_namespace, "p")
    pod = core.read_namespaced_pod("p", test_namespace)
    assert pod.status.phase == "Failed"
    assert all(c.state.terminated.exit_code == 1 for c in pod.status.container_statuses)
    wait_for(lambda: [hook for hook, _, _ in recorder.calls] == ["running", "stopped"], what="on_pod_stopped")


def test_vanish_deletes_a_pod(dev_cluster, core, recorder, test_namespace):
    core.create_namespaced_pod(test_namespace, pod_manifest("p"))
    wait_ready(core, test_namespace, "p")
    dev_cluster.kubelet.vanish(test_namespace, "p")
    with pytest.raises(ApiException) as error:
        core.read_namespaced_pod("p", test_namespace)
    assert error.value.status == 404
    wait_for(lambda: [hook for hook, _, _ in recorder.calls] == ["running", "stopped"], what="on_pod_stopped")


def test_controls_refuse_pods_that_are_not_running(dev_cluster, test_namespace):
    with pytest.raises(LookupError):
        dev_cluster.kubelet.crash(test_namespace, "nope")
    with pytest.raises(LookupError):
        dev_cluster.kubelet.vanish(test_namespace, "nope")


def test_a_failing_listener_never_stops_the_kubelet_or_other_listeners(dev_cluster, core, test_namespace):
    broken, fine = Broken(), AsyncRecorder(test_namespace)
    dev_cluster.kubelet.add_listener(broken)
    dev_cluster.kubelet.add_listener(fine)
    try:
        core.create_namespaced_pod(test_namespace, pod_manifest("p"))
        wait_ready(core, test_namespace, "p")
        core.delete_namespaced_pod("p", test_namespace)
        wait_for(lambda: [hook for hook, _, _ in fine.calls] == ["running", "stopped"], what="both hooks")
        core.create_namespaced_pod(test_namespace, pod_manifest("q"))
        wait_ready(core, test_namespace, "q")
    finally:
        dev_cluster.kubelet.remove_listener(broken)
        dev_cluster.kubelet.remove_listener(fine)
