"""A node agent for the real control plane: fake NPU nodes whose pods run as simulated engines.

It does over HTTP what a kubelet does for the parts this project depends on, against a real kube-apiserver:

- registers ``N`` Node objects (``sim-node-1..N``) with the chip's NPU capacity (``huawei.com/Ascend910: 8`` by
  default) and keeps them alive: their Ready condition's heartbeat and their Lease in ``kube-node-lease``, so
  the node lifecycle controller never marks them unreachable;
- watches the pods the real scheduler bound to them (list, then watch from the list's resourceVersion; a
  ``410 Gone`` or a lost connection starts over), and runs each: after ``start_seconds`` phase ``Running``
  with a unique loopback ``podIP`` (127.11.0.1 upwards; a RealCluster starts at the first address of a
  block no other cluster on the machine holds), ``containerStatuses`` and conditions; after
  ``ready_seconds`` more, ``Ready``. Listeners (:class:`~ascend_fleet_dev.fleet.kubelet.PodListener`) hear
  ``on_pod_running``/``on_pod_stopped``: that is where simulated engines start and stop;
- comes back from an API outage as a kubelet does: heartbeats and the pod watch back off while the API is
  down (:class:`Backoff`), the pods are listed again once it answers, and a pod whose status in the API differs
  from what this agent last wrote (the node lifecycle controller marks the pods of a node it lost NotReady) gets
  the agent's status written again, as the kubelet's status manager reconciles;
- honours graceful deletion: once a pod has a ``deletionTimestamp`` its engine stops, then the pod is deleted
  with grace period 0 and the pod's uid as precondition, as a kubelet does once its containers have exited.

Its test controls (:meth:`crash`, :meth:`fail`, :meth:`vanish`, :meth:`pod_ip`) match the emulator's kubelet
simulator, so one end-to-end test runs on either. :meth:`power_off` and :meth:`power_on` (the real control plane
only) kill a node as a power cut does: its heartbeats stop, its engines stop answering, and nothing on it writes
to the API any more, so the node lifecycle controller sees what it sees when a machine dies.

It also plays the Ascend device plugin (:mod:`~ascend_fleet_dev.real.deviceplugin`): each pod gets its
NPUs written on it, each node's NPU health is published in ``kube-system``, and :meth:`mark_npu_unhealthy` breaks
an NPU (the ConfigMap lists it with its fault, and the node's allocatable loses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp

from ascend_fleet.api import names
from ascend_fleet_dev.fleet import kubelet as podstate
from ascend_fleet_dev.fleet.kubelet import (
    DEFAULT_NODE_CAPACITY,
    PodGone,
    SimulatedPod,
    SimulatedPods,
)
from ascend_fleet_dev.real.controlplane import ApiServerAccess
from ascend_fleet_dev.real.deviceplugin import DevicePlugin

_log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 10.0
LEASE_SECONDS = 40
# One request may wait this long (an API server without etcd answers only after its own timeout).
REQUEST_TIMEOUT_SECONDS = 15.0
# Retries while the API is down start quick and slow down to this (the watch and the heartbeats).
FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 5.0
_T = TypeVar("_T")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class HeartbeatFailed(RuntimeError):
    """A node's status or Lease could not be written."""


class Backoff:
    """Waits that double from ``first`` to ``cap`` while failures go on; :meth:`reset` after a success."""

    def __init__(self, first: float = FIRST_RETRY_SECONDS, cap: float = MAX_RETRY_SECONDS) -> None:
        """A backoff whose next wait is ``first``."""
        self.first, self.cap = first, cap
        self._next = first

    def next(self) -> float:
        """The wait before the next attempt; the one after is twice as long, up to ``cap``."""
        wait, self._next = self._next, min(self._next * 2, self.cap)
        return wait

    def reset(self) -> None:
        """Start again from ``first`` (the last attempt succeeded)."""
        self._next = self.first


def status_signature(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a kubelet owns in a pod's status, comparable: phase, IP, condition states, container states."""
    conditions = sorted((c.get("type"), c.get("status")) for c in status.get("conditions") or [])
    containers = sorted(
        (c.get("name"), bool(c.get("ready")), tuple(sorted(c.get("state") or {})))
        for c in status.get("containerStatuses") or []
    )
    return status.get("phase"), status.get("podIP"), tuple(conditions), tuple(containers)


class NodeAgent(SimulatedPods):
    """Plays ``nodes`` kubelets against the API at ``credentials``; runs in its own thread (start/stop)."""

    def __init__(
        self,
        credentials: ApiServerAccess,
        *,
        nodes: int = 4,
        node_capacity: Mapping[str, str] | None = None,
        start_seconds: float = 1.0,
        ready_seconds: float = 1.0,
        first_ip: str = "127.11.0.1",
    ) -> None:
        super().__init__(first_ip)
        self.credentials = credentials
        self.node_names = [f"sim-node-{index}" for index in range(1, nodes + 1)]
        self.node_capacity = dict(node_capacity or DEFAULT_NODE_CAPACITY)
        self.start_seconds = start_seconds
        self.ready_seconds = ready_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self.watch_restarts = 0
        self.status_resyncs = 0
        self.heartbeats = 0
        # The status this agent last wrote per pod uid, and the pods with a status write out.
        self._published: dict[str, dict[str, Any]] = {}
        self._republishing: set[str] = set()
        self._powered_off: set[str] = set()  # nodes whose kubelet is dead (power_off)
        self.device_plugin = DevicePlugin({name: self.node_capacity for name in self.node_names})

    # Lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> NodeAgent:
        """Register the nodes and start running pods; returns once the nodes exist."""
        self._thread = threading.Thread(target=self._run, name="ascend-fleet-node-agent", daemon=True)
        self._thread.start()
        if not self._started.wait(60):
            raise TimeoutError("the node agent did not start in 60s")
        if self._failure is not None:
            raise RuntimeError("the node agent failed to start") from self._failure
        return self

    def stop(self) -> None:
        """Stop every pod's engine (listeners hear ``on_pod_stopped``) and the agent's thread."""
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported to the starting thread
            self._failure = error
            _log.exception("the node agent stopped")
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        connector = aiohttp.TCPConnector(ssl=self.credentials.ssl_context(), limit=20)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(
            self.credentials.url, connector=connector, timeout=timeout
        ) as session:
            self._session = session
            for name in self.node_names:
                await self._register_node(name)
            tasks = [
                asyncio.create_task(self._heartbeats(), name="node heartbeats"),
                asyncio.create_task(self._watch_pods(), name="pod watch"),
            ]
            self._started.set()
            await self._stopping.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            running = [pod.task for pod in self._pods.values() if pod.task is not None]
            for pod in self._pods.values():
                pod.stopped.set()
            if running:
                await asyncio.wait(running, timeout=10)
        self._loop = None

    # HTTP -------------------------------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        assert self._session is not None
        data = None if body is None else json.dumps(body)
        async with self._session.request(
            method, path, data=data, params=params, headers={"Content-Type": content_type}
        ) as response:
            text = await response.text()
            try:
                payload = json.loads(text) if text else {}
            except ValueError:
                payload = {"message": text}
            return response.status, payload

    async def _patch_status(self, path: str, status: dict[str, Any]) -> dict[str, Any] | None:
        code, body = await self._request(
            "PATCH", path + "/status", {"status": status}, content_type="application/merge-patch+json"
        )
        if code == 404:
            return None
        if code >= 300:
            _log.warning("status write to %s refused: %s %s", path, code, body.get("message"))
            return None
        return body

    # Nodes ------------------------------------------------------------------------------------------------

    async def _register_node(self, name: str) -> None:
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}}
        code, body = await self._request("POST", "/api/v1/nodes", node)
        if code not in (201, 409):
            raise RuntimeError(f"could not register node {name}: {code} {body.get('message')}")
        await self._heartbeat(name)
        await self._publish_device_info(name)

    def _node_status(self, name: str) -> dict[str, Any]:
        status = podstate.node_status(name, self.node_capacity)
        status["allocatable"] = self.device_plugin.allocatable(
            name
        )  # less the NPUs the plugin calls unhealthy
        return status

    async def _publish_device_info(self, node: str) -> None:
        """Write the node's NPU health ConfigMap, as the device plugin does."""
        configmap = self.device_plugin.configmap(node, datetime.now(UTC).timestamp())
        path = f"/api/v1/namespaces/{names.DEVICE_INFO_NAMESPACE}/configmaps"
        code, body = await self._request("PUT", f"{path}/{configmap['metadata']['name']}", configmap)
        if code == 404:
            code, body = await self._request("POST", path, configmap)
        if code >= 300:
            raise RuntimeError(f"could not publish the NPU health of {node}: {code} {body.get('message')}")

    async def _mount(self, pod: dict[str, Any], node: str) -> None:
        """Give a new pod its NPUs and write them on it (``huawei.com/AscendReal``), as the device plugin does."""
        npus = self.device_plugin.assign(pod["metadata"]["uid"], node, pod)
        if not npus:
            return
        patch = {"metadata": {"annotations": {names.ANNOTATION_NPUS_MOUNTED: ",".join(npus)}}}
        meta = pod["metadata"]
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            await self._request(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                patch,
                content_type="application/merge-patch+json",
            )

    async def _heartbeat(self, name: str) -> None:
        code, body = await self._request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": self._node_status(name)},
            content_type="application/merge-patch+json",
        )
        if code == 404:
            # The Node was deleted while this agent was away: a kubelet registers it again.
            await self._register_node(name)
            return
        if code >= 300:
            raise HeartbeatFailed(f"node {name} status: {code} {body.get('message')}")
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_now()}
        code, body = await self._request(
            "PATCH", lease_path, {"spec": spec}, content_type="application/merge-patch+json"
        )
        if code == 404:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": spec,
            }
            code, body = await self._request(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
            )
        if code >= 300:
            raise HeartbeatFailed(f"node {name} lease: {code} {body.get('message')}")
        self.heartbeats += 1

    async def _heartbeats(self) -> None:
        retry = Backoff()
        wait = HEARTBEAT_SECONDS
        while True:
            await asyncio.sleep(wait)
            failed = False
            for name in self.node_names:
                if name in self._powered_off:
                    continue
                try:
                    await self._heartbeat(name)
                except (
                    aiohttp.ClientError,
                    OSError,
                    TimeoutError,
                    RuntimeError,
                ) as error:  # HeartbeatFailed too
                    failed = True
                    _log.info("node heartbeat for %s failed (%s); retrying", name, error)
            # While the API is down, try again soon (backing off), so the nodes are fresh soon after it is back.
            if failed:
                wait = min(retry.next(), HEARTBEAT_SECONDS)
            else:
                retry.reset()
                wait = HEARTBEAT_SECONDS

    # Pods ------------------------------------------------------------------------------------------------

    async def _watch_pods(self) -> None:
        assert self._session is not None
        selector = {"fieldSelector": "spec.nodeName!="}
        retry = Backoff()
        while True:
            try:
                code, listing = await self._request("GET", "/api/v1/pods", params=selector)
                if code != 200:
                    raise aiohttp.ClientError(f"pod list answered {code}")
                retry.reset()
                for pod in listing.get("items") or []:
                    self._seen(pod)
                self._forget_missing({item["metadata"]["uid"] for item in listing.get("items") or []})
                version = listing["metadata"]["resourceVersion"]
                await self._follow(selector, version)
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError) as error:
                _log.info("pod watch interrupted (%s); starting over", error)
                self.watch_restarts += 1
                await asyncio.sleep(retry.next())

    async def _follow(self, selector: Mapping[str, str], version: str) -> None:
        assert self._session is not None
        params = {
            **selector,
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
        }
        async with self._session.get(
            "/api/v1/pods", params=params, timeout=aiohttp.ClientTimeout(None)
        ) as response:
            if response.status != 200:
                raise aiohttp.ClientError(f"pod watch answered {response.status}")
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, pod = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise aiohttp.ClientError(f"watch error: {pod.get('message')}")  # 410 Gone: list again
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED" or pod.get("metadata", {}).get("deletionTimestamp"):
                    self._stopped(pod)
                else:
                    self._seen(pod)

    def _seen(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        if metadata.get("deletionTimestamp"):
            self._stopped(pod)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in self.node_names or node in self._powered_off:
            return
        new = metadata["uid"] not in self._pods
        self._track(pod)
        if new and metadata["uid"] in self._pods:
            asyncio.create_task(self._mount(pod, node), name=f"NPUs of {metadata['name']}")
        self._resync(pod)

    def _resync(self, pod: dict[str, Any]) -> None:
        """Write this agent's status again where the API's copy differs (someone else changed it)."""
        uid = pod["metadata"]["uid"]
        published = self._published.get(uid)
        if published is None or uid in self._republishing or uid not in self._pods:
            return
        if status_signature(pod.get("status") or {}) == status_signature(published):
            return
        self._republishing.add(uid)
        asyncio.create_task(self._republish(self._pods[uid]), name=f"status of {pod['metadata']['name']}")

    async def _republish(self, state: SimulatedPod) -> None:
        try:
            published = self._published.get(state.uid)
            if published is None:
                return
            written = await self._patch_status(self._pod_path(state), published)
            if written is not None and written.get("metadata", {}).get("uid") == state.uid:
                state.last = written
                self.status_resyncs += 1
                _log.info(
                    "pod %s/%s: status written again (it differed in the API)", state.namespace, state.name
                )
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            _log.info(
                "pod %s/%s: status not written again (%s); next list", state.namespace, state.name, error
            )
        finally:
            self._republishing.discard(state.uid)

    def _stopped(self, pod: dict[str, Any]) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in self._powered_off:
            return  # a dead kubelet confirms nothing: the pod stays Terminating in the API
        if self._signal_stopped(pod):
            return
        if pod["metadata"].get("deletionTimestamp") and node in self.node_names:
            # Deleted before it ever ran here (or while the agent was away): finish the deletion.
            asyncio.create_task(self._finish_deletion(pod))

    def _forget_missing(self, present: set[str]) -> None:
        for uid, state in list(self._pods.items()):
            if uid not in present:
                state.stopped.set()

    def _pod_path(self, state: SimulatedPod) -> str:
        return f"/api/v1/namespaces/{state.namespace}/pods/{state.name}"

    async def _edit(self, state: SimulatedPod, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        pod = copy.deepcopy(state.last)
        change(pod)
        # While this write is out, the watch may bring its result first: no status to reconcile against yet.
        self._republishing.add(state.uid)
        try:
            written = await self._patch_status(self._pod_path(state), pod.get("status") or {})
        finally:
            self._republishing.discard(state.uid)
        if written is None or written.get("metadata", {}).get("uid") != state.uid:
            raise PodGone
        state.last = written
        self._published[state.uid] = copy.deepcopy(written.get("status") or {})
        return written

    async def _write(self, state: SimulatedPod, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        return await self._edit(state, change)

    async def _lifecycle(self, state: SimulatedPod) -> None:
        try:
            await self._serve(state)
        except PodGone:
            pass
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            _log.info(
                "pod %s/%s: the API went away (%s); picking it up again on the next list",
                state.namespace,
                state.name,
                error,
            )
        finally:
            self._pods.pop(state.uid, None)
            self._published.pop(state.uid, None)
            self.device_plugin.release(state.uid)
            if state.running:
                await self._notify("on_pod_stopped", state.last)
            node = (state.last.get("spec") or {}).get("nodeName")
            if state.last.get("metadata", {}).get("deletionTimestamp") and node not in self._powered_off:
                await self._finish_deletion(state.last)

    async def _finish_deletion(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": metadata["uid"]},
        }
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            await self._request(
                "DELETE", f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}", body
            )

    # Test controls (thread-safe) ----------------------------------------------------------------------

    def crash(self, namespace: str, name: str, container: str | None = None) -> dict[str, Any]:
        """Crash a running pod's container (all of them by default) into CrashLoopBackOff; returns the pod."""
        return self._run_on_loop(self._crash(namespace, name, container))

    def fail(self, namespace: str, name: str) -> dict[str, Any]:
        """Turn a pod to phase Failed (containers terminated with exit code 1); returns the pod."""
        return self._run_on_loop(self._fail(namespace, name))

    def vanish(self, namespace: str, name: str) -> None:
        """Delete a pod at once (grace period 0), as if its node went away."""
        self._run_on_loop(self._vanish(namespace, name))

    def pod_ip(self, namespace: str, name: str) -> str | None:
        return self._running_ip(namespace, name)

    def status_in_step(self, pod: dict[str, Any]) -> bool:
        """True when this agent runs ``pod`` (same uid) and the API's copy of its status is the one the agent
        last wrote: nothing for the agent to write again."""
        uid = pod["metadata"]["uid"]
        published = self._published.get(uid)
        return (
            uid in self._pods
            and uid not in self._republishing
            and published is not None
            and status_signature(pod.get("status") or {}) == status_signature(published)
        )

    def power_off(self, node: str) -> list[str]:
        """Kill ``node``: no more heartbeats or status writes, and its engines stop; returns its pods' names."""
        if node not in self.node_names:
            raise LookupError(f"{node} is not one of this agent's nodes ({', '.join(self.node_names)})")
        return self._run_on_loop(self._power_off(node))

    def power_on(self, node: str) -> None:
        """Bring ``node`` back as a rebooted machine: heartbeats resume, and its pods are listed and run again
        (those deleted meanwhile are confirmed deleted, as a kubelet does on start)."""
        self._run_on_loop(self._power_on(node))

    async def _power_off(self, node: str) -> list[str]:
        self._powered_off.add(node)
        on_node = [s for s in self._pods.values() if (s.last.get("spec") or {}).get("nodeName") == node]
        for state in on_node:
            state.stopped.set()  # its lifecycle ends: listeners hear on_pod_stopped, no status is written
        return [state.name for state in on_node]

    async def _power_on(self, node: str) -> None:
        self._powered_off.discard(node)
        await self._heartbeat(node)
        code, listing = await self._request(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"}
        )
        if code != 200:
            raise RuntimeError(f"could not list the pods of {node}: {code} {listing.get('message')}")
        for pod in listing.get("items") or []:
            self._seen(pod)

    def mark_npu_unhealthy(
        self, node: str, index: int = 0, level: str = "SeparateNPU", code: str = "80E01801"
    ) -> str:
        """Break NPU ``index`` of ``node`` as the device plugin reports a fault: its health ConfigMap lists the
        NPU unhealthy with the fault, and the node's allocatable loses it; returns the NPU's name."""
        if node not in self.node_names:
            raise LookupError(f"{node} is not one of this agent's nodes ({', '.join(self.node_names)})")
        return self._run_on_loop(self._mark_npu_unhealthy(node, index, level, code))

    async def _mark_npu_unhealthy(self, node: str, index: int, level: str, code: str) -> str:
        npu = self.device_plugin.break_npu(node, index, level, code, datetime.now(UTC).timestamp())
        await self._publish_device_info(node)
        await self._heartbeat(node)  # the new allocatable
        return npu

    def _run_on_loop(self, work: Coroutine[Any, Any, _T]) -> _T:
        if self._loop is None:
            work.close()
            raise RuntimeError("the node agent is not running")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=30)

    async def _crash(self, namespace: str, name: str, container: str | None) -> dict[str, Any]:
        state, change = self._crash_change(namespace, name, container)
        return await self._edit(state, change)

    async def _fail(self, namespace: str, name: str) -> dict[str, Any]:
        state = self._state(namespace, name)
        pod = await self._edit(state, podstate.fail_pod)
        state.stopped.set()
        return pod

    async def _vanish(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        code, _ = await self._request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        if code == 404:
            raise LookupError(f"pod {namespace}/{name} not found")
