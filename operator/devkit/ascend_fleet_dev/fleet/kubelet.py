"""A kubelet (and scheduler) simulator: pods go Pending -> Running -> Ready on loopback IPs.

It plays the cluster components of the local cluster. Like a real kubelet it watches pods and writes their
status, but it does so through an in-process store on the API server's own event loop rather than over HTTP:
the writes take exactly the path HTTP writes take (new resourceVersions, watch events, finalizers), with no
client, credentials, serialization or reconnects to manage, and a test control such as
:meth:`KubeletSimulator.crash` is visible to every watcher at once. What it needs of that store is
:class:`PodStore` (the emulator's ``ObjectStore`` is one), so this wing does not import the emulator.

What it does to a created pod:

1. binds it at once: ``spec.nodeName`` (round-robin over the simulated nodes ``sim-node-1..N`` unless the pod
   names one) and the ``PodScheduled`` condition; resources, selectors and taints are not considered;
2. after ``start_seconds``: phase ``Running``, a unique ``status.podIP`` from 127.10.0.1 upwards (Linux routes
   all of 127.0.0.0/8 to ``lo``, so a simulated engine can bind to it), ``hostIP`` 127.0.0.1, ``startTime``,
   the conditions and running ``containerStatuses``; then the listeners' ``on_pod_running``;
3. after ``ready_seconds`` more: ``Ready`` (at once when it is 0).

Deleting a pod removes it at once (grace periods are ignored: there is no process to stop), and the listeners
get ``on_pod_stopped``. Test controls: :meth:`crash` (CrashLoopBackOff, still Running), :meth:`fail` (phase
Failed) and :meth:`vanish` (deleted, as if its node went away).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ascend_fleet.api.times import rfc3339

_log = logging.getLogger(__name__)

# The resources as the store names them: API version and plural.
_PODS = "v1/pods"
_NODES = "v1/nodes"
DEFAULT_NODE_CAPACITY = {"cpu": "192", "memory": "1536Gi", "pods": "110", "huawei.com/Ascend910": "8"}
HOST_IP = "127.0.0.1"
_T = TypeVar("_T")


class PodListener(Protocol):
    """What the kubelet calls when a pod starts running and when it stops (either method may be absent).

    Methods get a copy of the pod as stored. Plain methods run in a worker thread (so they may block
    briefly without stalling the API); ``async def`` methods run on the cluster's event loop. For one pod,
    ``on_pod_stopped`` always comes after ``on_pod_running`` has returned, and only if it was called.
    Exceptions are logged and otherwise ignored.
    """

    def on_pod_running(self, pod: dict[str, Any]) -> Any: ...

    def on_pod_stopped(self, pod: dict[str, Any]) -> Any: ...


class WatchEvents(Protocol):
    """A watch the store opened: its events (``type`` and ``object``) until it is closed."""

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...

    def close(self) -> None: ...


class PodStore(Protocol):
    """What the kubelet needs of the store it runs pods from: watch pods, read, create and edit nodes, edit and
    delete pods; every call refuses with ``api_error`` (a missing object, above all). The calls run on the
    store's own event loop, so a read and the write after it see no other write in between."""

    @property
    def api_error(self) -> type[Exception]: ...

    def open_watch(self, resource: str, namespace: str | None = None) -> WatchEvents: ...

    def read_object(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    def create_object(
        self, resource: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...

    def modify_object(
        self,
        resource: str,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        namespace: str | None = None,
    ) -> dict[str, Any]: ...

    def delete_object(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]: ...


class PodGone(Exception):
    """The pod was deleted (or replaced by a namesake) while the kubelet was working on it."""


@dataclass
class SimulatedPod:
    namespace: str
    name: str
    uid: str
    last: dict[str, Any]
    running: bool = False
    crashed: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class SimulatedPods:
    """What both simulated kubelets keep and do per pod: this module's :class:`KubeletSimulator` (the
    emulator's) and the node agent of the real control plane.

    One lifecycle task per pod uid (:meth:`_track`), Pending -> Running -> Ready on a loopback IP with the
    listeners told (:meth:`_serve`), and the lookups of the test controls. A subclass says how a status is
    written (:meth:`_write`) and what its lifecycle adds around :meth:`_serve`.
    """

    start_seconds: float
    ready_seconds: float

    def __init__(self, first_ip: str) -> None:
        self._listeners: list[PodListener] = []
        self._pods: dict[str, SimulatedPod] = {}
        self._ips = PodIPs(first_ip)

    def add_listener(self, listener: PodListener) -> None:
        """Call ``listener`` on pod starts and stops from now on (pods already running are not replayed)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: PodListener) -> None:
        """Stop calling ``listener``."""
        self._listeners.remove(listener)

    def _track(self, pod: dict[str, Any]) -> None:
        """Keep the latest copy of a known pod; start the lifecycle of a new one that has not finished."""
        metadata = pod["metadata"]
        state = self._pods.get(metadata["uid"])
        if state is not None:
            state.last = pod
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        state = SimulatedPod(metadata.get("namespace", ""), metadata["name"], metadata["uid"], pod)
        self._pods[state.uid] = state
        state.task = asyncio.create_task(self._lifecycle(state), name=f"pod {state.namespace}/{state.name}")

    def _signal_stopped(self, pod: dict[str, Any]) -> bool:
        """Tell a known pod's lifecycle that the pod stopped (deleted, or going); False for an unknown pod."""
        state = self._pods.get(pod["metadata"]["uid"])
        if state is None:
            return False
        state.last = pod
        state.stopped.set()
        return True

    async def _lifecycle(self, state: SimulatedPod) -> None:
        raise NotImplementedError

    async def _write(self, state: SimulatedPod, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``change`` to the pod's status as stored; raise :class:`PodGone` if the pod is gone."""
        raise NotImplementedError

    async def _serve(self, state: SimulatedPod) -> None:
        """After ``start_seconds`` Running on a new IP (listeners hear ``on_pod_running``), after
        ``ready_seconds`` more Ready unless it crashed meanwhile; returns once the pod stops."""
        if await wait_event(state.stopped, self.start_seconds):
            return
        ready_now = self.ready_seconds <= 0
        ip = self._ips.next()
        pod = await self._write(state, lambda pod: run_pod(pod, ip, ready=ready_now))
        state.running = True
        await self._notify("on_pod_running", pod)
        if not ready_now and not await wait_event(state.stopped, self.ready_seconds) and not state.crashed:
            await self._write(state, lambda pod: set_ready(pod, True))
        await state.stopped.wait()

    async def _notify(self, hook: str, pod: dict[str, Any]) -> None:
        await notify_listeners(self._listeners, hook, pod)

    def _state(self, namespace: str, name: str) -> SimulatedPod:
        for state in self._pods.values():
            if (state.namespace, state.name) == (namespace, name) and not state.stopped.is_set():
                return state
        raise LookupError(f"pod {namespace}/{name} is not running on the simulated nodes")

    def _crash_change(
        self, namespace: str, name: str, container: str | None
    ) -> tuple[SimulatedPod, Callable]:
        """The pod and the status change that crashes its ``container`` (all when None); marks it crashed."""
        state = self._state(namespace, name)
        if not state.running:
            raise LookupError(f"pod {namespace}/{name} has not started yet")
        names = [status["name"] for status in state.last.get("status", {}).get("containerStatuses", [])]
        if container is not None and container not in names:
            raise LookupError(f"pod {namespace}/{name} has no container {container!r}")
        state.crashed = True
        return state, lambda pod: crash_pod(pod, [container] if container else names)

    def _running_ip(self, namespace: str, name: str) -> str | None:
        try:
            state = self._state(namespace, name)
        except LookupError:
            return None
        return (state.last.get("status") or {}).get("podIP") if state.running else None


class KubeletSimulator(SimulatedPods):
    """Runs every pod of the store on simulated nodes; see the module docstring for the lifecycle."""

    def __init__(
        self,
        store: PodStore,
        *,
        start_seconds: float = 1.0,
        ready_seconds: float = 1.0,
        nodes: int = 4,
        node_capacity: Mapping[str, str] | None = None,
        first_ip: str = "127.10.0.1",
    ) -> None:
        """Simulate ``nodes`` nodes with ``node_capacity`` each (an Ascend 910 node by default)."""
        super().__init__(first_ip)
        self.store = store
        self.start_seconds = start_seconds
        self.ready_seconds = ready_seconds
        self.node_names = [f"sim-node-{index}" for index in range(1, nodes + 1)]
        self.node_capacity = dict(node_capacity or DEFAULT_NODE_CAPACITY)
        self._next_node = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stream: WatchEvents | None = None
        self._watcher: asyncio.Task[None] | None = None

    # Lifecycle of the simulator ------------------------------------------------------------------

    async def start(self) -> None:
        """Register the nodes and start watching pods (on the loop that serves the store)."""
        self._loop = asyncio.get_running_loop()
        for name in self.node_names:
            self._register_node(name)
        self._stream = self.store.open_watch(_PODS)
        self._watcher = asyncio.create_task(self._watch(self._stream), name="kubelet-simulator")

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop watching, stop every pod (listeners get ``on_pod_stopped``) and wait for that to finish."""
        if self._stream is not None:
            self._stream.close()
        if self._watcher is not None:
            await asyncio.wait([self._watcher], timeout=timeout)
            self._watcher.cancel()
        tasks = [pod.task for pod in self._pods.values() if pod.task is not None]
        for pod in self._pods.values():
            pod.stopped.set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
        self._loop = None

    def _register_node(self, name: str) -> None:
        try:
            self.store.read_object(_NODES, name)
            return
        except self.store.api_error:
            pass
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        self.store.create_object(_NODES, {"metadata": {"name": name, "labels": labels}, "spec": {}})
        self.store.modify_object(_NODES, name, lambda node: node.update(status=self._node_status(name)))

    def _node_status(self, name: str) -> dict[str, Any]:
        return node_status(name, self.node_capacity)

    # Watching pods ------------------------------------------------------------------------------

    async def _watch(self, stream: WatchEvents) -> None:
        async for event in stream:
            pod = event.get("object") or {}
            metadata = pod.get("metadata") or {}
            if event["type"] == "DELETED" or metadata.get("deletionTimestamp"):
                self._stopped(pod)
            elif event["type"] in ("ADDED", "MODIFIED"):
                self._seen(pod)

    def _seen(self, pod: dict[str, Any]) -> None:
        self._track(pod)

    def _stopped(self, pod: dict[str, Any]) -> None:
        self._signal_stopped(pod)

    async def _lifecycle(self, state: SimulatedPod) -> None:
        try:
            self._edit(state, self._bind)
            await self._serve(state)
        except PodGone:
            pass
        finally:
            self._pods.pop(state.uid, None)
            if state.running:
                await self._notify("on_pod_stopped", state.last)

    def _bind(self, pod: dict[str, Any]) -> None:
        spec = pod.setdefault("spec", {})
        if not spec.get("nodeName"):
            spec["nodeName"] = self.node_names[self._next_node % len(self.node_names)]
            self._next_node += 1
        status = pod.setdefault("status", {})
        status.setdefault("phase", "Pending")
        _set_condition(status, "PodScheduled", True)

    async def _write(self, state: SimulatedPod, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        return self._edit(state, change)

    def _edit(self, state: SimulatedPod, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        def guarded(pod: dict[str, Any]) -> None:
            if pod["metadata"]["uid"] != state.uid:
                raise PodGone
            change(pod)

        try:
            pod = self.store.modify_object(_PODS, state.name, guarded, state.namespace)
        except self.store.api_error as e:
            raise PodGone from e
        state.last = pod
        return pod

    # Test controls (thread-safe) -------------------------------------------------------------------

    def crash(self, namespace: str, name: str, container: str | None = None) -> dict[str, Any]:
        """Crash a running pod's container (all of them if ``container`` is None) into CrashLoopBackOff.

        Its ``restartCount`` grows by one, it is not ready, and the pod is not Ready but stays Running.
        Returns the pod; raises LookupError if the pod (or container) is not running here.
        """
        return self._run_on_loop(self._crash, namespace, name, container)

    def fail(self, namespace: str, name: str) -> dict[str, Any]:
        """Turn a pod to phase Failed (its containers terminated with exit code 1); returns the pod."""
        return self._run_on_loop(self._fail, namespace, name)

    def vanish(self, namespace: str, name: str) -> None:
        """Delete a pod, as if its node disappeared; raises LookupError if there is no such pod."""
        self._run_on_loop(self._vanish, namespace, name)

    def pod_ip(self, namespace: str, name: str) -> str | None:
        """The IP the simulator gave a pod, if it is running."""
        return self._run_on_loop(self._pod_ip, namespace, name)

    def _run_on_loop(self, function: Callable[..., _T], *args: Any) -> _T:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the kubelet simulator is not running")
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            return function(*args)

        async def call() -> _T:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=30)

    def _crash(self, namespace: str, name: str, container: str | None) -> dict[str, Any]:
        state, change = self._crash_change(namespace, name, container)
        return self._edit(state, change)

    def _fail(self, namespace: str, name: str) -> dict[str, Any]:
        state = self._state(namespace, name)
        pod = self._edit(state, fail_pod)
        state.stopped.set()
        return pod

    def _vanish(self, namespace: str, name: str) -> None:
        try:
            self.store.delete_object(_PODS, name, namespace)
        except self.store.api_error as e:
            raise LookupError(f"pod {namespace}/{name} not found") from e

    def _pod_ip(self, namespace: str, name: str) -> str | None:
        return self._running_ip(namespace, name)


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``event``; True if it was set."""
    try:
        await asyncio.wait_for(event.wait(), max(seconds, 0))
    except TimeoutError:
        return event.is_set()
    return True


async def notify_listeners(listeners: list[PodListener], hook: str, pod: dict[str, Any]) -> None:
    """Call ``hook`` of every listener with a copy of ``pod`` (see :class:`PodListener`); failures are logged."""
    for listener in list(listeners):
        method = getattr(listener, hook, None)
        if method is None:
            continue
        try:
            if inspect.iscoroutinefunction(method):
                await method(copy.deepcopy(pod))
            else:
                await asyncio.to_thread(method, copy.deepcopy(pod))
        except Exception:
            _log.exception("Pod listener %r failed in %s; the node carries on.", listener, hook)


class PodIPs:
    """Pod IPs from ``first`` upwards, never reused, never .0 or .255: each pod gets an address nothing else
    has bound (Linux routes all of 127.0.0.0/8 to ``lo``, so a simulated engine can listen on it)."""

    def __init__(self, first: str) -> None:
        self._next = ipaddress.IPv4Address(first)

    def next(self) -> str:
        while self._next.packed[-1] in (0, 255):
            self._next += 1
        ip, self._next = self._next, self._next + 1
        return str(ip)


def _now() -> str:
    """The current time as the API writes it (whole seconds, UTC)."""
    return rfc3339(time.time())


def _set_condition(status: dict[str, Any], kind: str, value: bool, reason: str | None = None) -> None:
    conditions = status.setdefault("conditions", [])
    text = "True" if value else "False"
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is None:
        current = {"type": kind, "status": text, "lastProbeTime": None, "lastTransitionTime": _now()}
        conditions.append(current)
    elif current.get("status") != text:
        current.update(status=text, lastTransitionTime=_now())
    if reason:
        current["reason"] = reason
    else:
        current.pop("reason", None)


def run_pod(pod: dict[str, Any], ip: str, *, ready: bool, host_ip: str = HOST_IP) -> None:
    """Phase Running with ``ip``, running containerStatuses, Initialized, and Ready when ``ready``."""
    now = _now()
    status = pod.setdefault("status", {})
    status.update(
        phase="Running",
        podIP=ip,
        podIPs=[{"ip": ip}],
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        startTime=status.get("startTime") or now,
    )
    status["containerStatuses"] = [
        {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": f"sim://{pod['metadata']['uid']}/{container['name']}",
            "ready": ready,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for container in pod.get("spec", {}).get("containers") or []
    ]
    _set_condition(status, "Initialized", True)
    set_ready(pod, ready)


def set_ready(pod: dict[str, Any], ready: bool) -> None:
    status = pod.setdefault("status", {})
    for container in status.get("containerStatuses") or []:
        container["ready"] = ready and "running" in (container.get("state") or {})
    _sync_readiness(status)


def _sync_readiness(status: dict[str, Any]) -> None:
    # The pod is ready when all its containers are (no readiness gates here).
    all_ready = all(container["ready"] for container in status.get("containerStatuses") or [])
    reason = None if all_ready else "ContainersNotReady"
    _set_condition(status, "ContainersReady", all_ready, reason)
    _set_condition(status, "Ready", all_ready, reason)


def crash_pod(pod: dict[str, Any], containers: list[str]) -> None:
    """The named containers restart into CrashLoopBackOff (restartCount + 1); the pod stays Running."""
    now = _now()
    status = pod["status"]
    for container in status.get("containerStatuses") or []:
        if container["name"] not in containers:
            continue
        started = (container.get("state") or {}).get("running", {}).get("startedAt", now)
        container.update(
            ready=False,
            started=False,
            restartCount=int(container.get("restartCount", 0)) + 1,
            lastState={
                "terminated": {"exitCode": 1, "reason": "Error", "startedAt": started, "finishedAt": now}
            },
            state={
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off 10s restarting failed container={container['name']}",
                }
            },
        )
    _sync_readiness(status)


def fail_pod(pod: dict[str, Any]) -> None:
    """Phase Failed, every container terminated with exit code 1."""
    now = _now()
    status = pod.setdefault("status", {})
    status["phase"] = "Failed"
    for container in status.get("containerStatuses") or []:
        started = (container.get("state") or {}).get("running", {}).get("startedAt", now)
        container.update(
            ready=False,
            started=False,
            state={"terminated": {"exitCode": 1, "reason": "Error", "startedAt": started, "finishedAt": now}},
        )
    set_ready(pod, False)


def node_status(name: str, capacity: Mapping[str, str]) -> dict[str, Any]:
    """A Ready node's status: capacity (= allocatable), a fresh heartbeat, loopback address, node info."""
    now = _now()
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status (simulated)",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": [ready],
        "addresses": [{"type": "InternalIP", "address": HOST_IP}, {"type": "Hostname", "address": name}],
        "nodeInfo": {
            "kubeletVersion": "v1.34.4-sim",
            "containerRuntimeVersion": "sim://1.0",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }
