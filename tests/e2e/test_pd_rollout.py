"""A rollout of a routed two-role fleet under steady traffic fails no request, and keeps pairs within a revision.

On the real control plane the operator reconciles ``examples/vllm-disaggregated-routed.yaml`` (one prefill and
two decode replicas, ``routing.mode: inferencePool``) with a short ``spec.disruption``; its engines are
simulated, its picker pods run the project's picker build behind the pool's gateway (``bench.failover.picker``'s
``routed``), and a client sends a completion every 0.1 s through that gateway. A template annotation then
changes every pod of both roles, and the test waits until the fleet is settled at the new revision.

What the client's answers tell: the gateway returns the ``x-prefiller-host-port`` header as the decode pod
received it (the prefill pod the picker chose) and the address of the engine that answered; a watcher records
every pod's IP, role and revision as it appears (old pods are deleted during the run), and when each turned
Ready and left service. From those the test checks that no request failed, that the rollout replaced every pod,
that a named prefill pod always had the serving decode pod's revision (an old decode pod was never left
without one), that the old prefill pod left the pool only once no old decode pod served (decode first:
``may_roll_out`` in ``reconcile/plan.py``). When the new decode pods turned Ready against the old prefill pod's
deletion is printed, not asserted: no rule orders them (an old prefill pod pairs with old decode pods alone, so
it serves no one once they are gone), and here the drain's length alone decides it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from bench.failover.picker import PlannedRun, Traffic, engine_pods, operate, routed, settled

from ascend_fleet.api import names
from ascend_fleet.kube import Kube, wait_for
from ascend_fleet_dev.real.dataplane import DataPlaneUnavailable
from ascend_fleet_dev.real.disaggregation import PREFILL_HEADER
from ascend_fleet_dev.stack import Stack

pytestmark = pytest.mark.e2e
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vllm-disaggregated-routed.yaml"
NAMESPACE = "pd-rollout"
RATE = 10.0  # requests per second
DRAIN_SECONDS = 3  # spec.disruption.drainSeconds: a request here lasts well under a second
REPLICAS = 3  # one prefill, two decode
SERVED_BY = "x-served-by"  # the gateway's response header: host:port of the engine that answered
WATCH_INTERVAL = 0.1


def inference() -> dict:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = NAMESPACE
    doc["spec"]["disruption"] = {"maxUnavailable": 1, "drainSeconds": DRAIN_SECONDS}
    return doc


@dataclass
class Seen:
    """One engine pod as the watcher saw it; times on the monotonic clock, first seen."""

    name: str
    role: str
    revision: str
    leader: bool
    ip: str = ""
    ready: float | None = None
    drained: float | None = None  # out of the pool: draining (label serving=false), being deleted or gone
    deleted: float | None = None  # being deleted or gone


@dataclass
class Watcher:
    """Every engine pod of the fleet, sampled every ``WATCH_INTERVAL`` on a thread of its own."""

    kube: Kube
    name: str
    pods: dict[str, Seen] = field(default_factory=dict)  # by UID
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        now, present = time.monotonic(), set()
        for pod in engine_pods(self.kube, NAMESPACE, self.name):
            meta, status = pod["metadata"], pod.get("status") or {}
            labels = meta.get("labels") or {}
            present.add(meta["uid"])
            seen = self.pods.setdefault(
                meta["uid"],
                Seen(
                    meta["name"],
                    labels.get(names.LABEL_PD_ROLE, ""),
                    labels.get(names.LABEL_REVISION, ""),
                    labels.get(names.LABEL_RANK) == "0",
                ),
            )
            seen.ip = seen.ip or status.get("podIP", "")
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
            )
            if ready and seen.ready is None:
                seen.ready = now
            if meta.get("deletionTimestamp") and seen.deleted is None:
                seen.deleted = now
            if (seen.deleted or labels.get(names.LABEL_SERVING) == "false") and seen.drained is None:
                seen.drained = now
        for uid, seen in self.pods.items():
            if uid not in present:
                seen.deleted = seen.deleted or now
                seen.drained = seen.drained or now

    def by_ip(self) -> dict[str, Seen]:
        found: dict[str, Seen] = {}
        for seen in self.pods.values():
            if seen.ip:
                assert seen.ip not in found, f"{seen.ip} was {found[seen.ip].name} and {seen.name}"
                found[seen.ip] = seen
        return found

    def run(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL):
            self.sample()

    def __enter__(self) -> Watcher:
        self.sample()
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass
class Pairing:
    """Each answered request's decode pod and the prefill pod the picker named for it (None: unpaired)."""

    paired: dict[tuple[str, str], int]  # (decode revision, prefill revision) -> requests
    unpaired: dict[str, int]  # decode revision -> requests served without a prefill pod
    strangers: list[dict[str, str]]  # answers naming an address no watched pod had, or a non-decode engine


def pairing(traffic: Traffic, pods: dict[str, Seen]) -> Pairing:
    result = Pairing({}, {}, [])
    for (_, ok), kept in zip(traffic.results, traffic.answers, strict=False):  # answers lead by one
        if not ok:
            continue
        decode = pods.get(kept.get(SERVED_BY, "").rpartition(":")[0])
        header = kept.get(PREFILL_HEADER)
        prefill = pods.get(header.rpartition(":")[0]) if header else None
        if decode is None or decode.role != names.PD_DECODE or (header and prefill is None):
            result.strangers.append(kept)
        elif prefill is None:
            result.unpaired[decode.revision] = result.unpaired.get(decode.revision, 0) + 1
        else:
            key = (decode.revision, prefill.revision)
            result.paired[key] = result.paired.get(key, 0) + 1
    return result


@pytest.fixture
def fleet(real_cluster):
    kube = real_cluster.kube
    doc = inference()
    try:
        with routed(
            Stack(real_cluster.cluster, kube),
            NAMESPACE,
            doc,
            echoed=[PREFILL_HEADER],
            upstream_header=SERVED_BY,
        ) as running:
            yield running, doc["metadata"]["name"]
    except DataPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the data plane: {error}")
        pytest.skip(str(error))
    finally:
        real_cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        real_cluster.kubectl("delete", "persistentvolume", f"models-{NAMESPACE}", "--wait=false", check=False)


def test_a_rollout_of_a_two_role_fleet_under_traffic_fails_no_request(real_cluster, fleet):
    running, name = fleet
    kube = real_cluster.kube
    wait_for(lambda: settled(kube, REPLICAS, NAMESPACE, name), 180, "both roles serving")
    running.warm()
    traffic = Traffic(running.pickers, RATE, NAMESPACE, name, running.model, (PREFILL_HEADER, SERVED_BY))
    with Watcher(kube, name) as watcher, traffic:
        wait_for(traffic.steady, 60, "steady answers")
        old = {p["metadata"]["uid"]: p for p in engine_pods(kube, NAMESPACE, name)}
        (old_revision,) = {p["metadata"]["labels"][names.LABEL_REVISION] for p in old.values()}
        wait_for(lambda: pairing(traffic, watcher.by_ip()).paired, 30, "a paired request before the rollout")
        run = PlannedRun({}, {})
        rollout = {"template": {"metadata": {"annotations": {"tests.ascendfleet.io/rollout": "1"}}}}
        operate(
            kube,
            traffic,
            "rollout",
            lambda: kube.patch(names.KIND, NAMESPACE, name, {"spec": rollout}),
            REPLICAS,
            run,
            NAMESPACE,
            name,
        )
        time.sleep(1)  # a few answers from the new pods alone
    new = engine_pods(kube, NAMESPACE, name)
    seen = pairing(traffic, watcher.by_ip())
    (new_revision,) = {p["metadata"]["labels"][names.LABEL_REVISION] for p in new}
    old_decode, old_prefill, new_decode = (
        [s for s in watcher.pods.values() if (s.revision, s.role) == (revision, role) and s.leader]
        for revision, role in (
            (old_revision, names.PD_DECODE),
            (old_revision, names.PD_PREFILL),
            (new_revision, names.PD_DECODE),
        )
    )
    prefill_drained = min(s.drained or float("inf") for s in old_prefill)
    prefill_deleted = min(s.deleted or float("inf") for s in old_prefill)
    decode_gone = max(s.deleted or float("inf") for s in old_decode)
    decode_ready = max(s.ready or float("inf") for s in new_decode)
    print(
        f"\nrollout: {run.sent['rollout']} requests sent, {run.failed['rollout']} failed, "
        f"{run.removed['rollout']} pods replaced; whole run {len(traffic.results)} sent, "
        f"paired {seen.paired}, unpaired {seen.unpaired}; the first old prefill pod drained "
        f"{prefill_drained - decode_gone:.1f} s after the last old decode pod's deletion began and was deleted "
        f"{prefill_deleted - decode_ready:.1f} s after the last new decode pod turned Ready"
    )

    # No request failed from the change until both roles were settled at the new revision.
    assert run.sent["rollout"] >= 50, "the rollout was too short to carry traffic"
    assert run.failed["rollout"] == 0
    # Every pod of both roles replaced: the old UIDs are gone, the new pods carry one new revision.
    assert not set(old) & {p["metadata"]["uid"] for p in new}
    assert new_revision != old_revision
    assert sorted(p["metadata"]["labels"][names.LABEL_PD_ROLE] for p in new) == [
        "decode",
        "decode",
        "prefill",
    ]
    # Pairs stay within a revision, both revisions were paired, and an old decode pod always had its prefill
    # peer (a new one computes prompts itself until a prefill pod of its revision is Ready).
    assert not seen.strangers
    assert {decode for decode, _ in seen.paired} == {old_revision, new_revision}
    assert all(decode == prefill for decode, prefill in seen.paired), seen.paired
    assert old_revision not in seen.unpaired, seen.unpaired
    # Decode first, the planner's rule: no old prefill pod left the pool while an old decode pod served (its
    # deletion not begun; a draining one still serves). Samples WATCH_INTERVAL apart: equal times are one sample.
    assert len(old_decode) == len(new_decode) == 2 and len(old_prefill) == 1
    assert decode_gone <= prefill_drained, watcher.pods
