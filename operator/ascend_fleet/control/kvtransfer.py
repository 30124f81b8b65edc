"""The ``KVTransfer`` condition of two-role fleets, read through Prometheus (the edge of
:mod:`ascend_fleet.status.kv_transfer`, which decides).

:func:`update_kv_transfer` is the one hook the control loop calls each cycle: for the objects with
``spec.disaggregation`` it asks Prometheus the decode engines' two increases (two queries for all fleets
together) and writes each fleet's condition where its status or reason changed.
"""

from __future__ import annotations

import asyncio
import logging

from ..api import names
from ..kube import Conflict, Kube, KubeError, NotFound
from ..observed import get_condition
from ..status import set_condition
from ..status.kv_transfer import (
    CONDITION_KV_TRANSFER,
    KV_TRANSFER_WINDOW_SECONDS,
    Key,
    KVTransferStatus,
    by_fleet,
    decide_kv_transfer,
    no_engine_counter,
    vllm_queries,
)
from .prometheus import Failed, Prometheus

_log = logging.getLogger(__name__)
VLLM_ENGINES = frozenset({"vllm-ascend"})
_WRITE_ATTEMPTS = 3


def two_roles(body: dict) -> bool:
    """Whether the object runs prefill and decode apart (``spec.disaggregation`` set) and is not being deleted."""
    meta = body.get("metadata") or {}
    return bool((body.get("spec") or {}).get("disaggregation")) and not meta.get("deletionTimestamp")


def key(body: dict) -> Key:
    meta = body.get("metadata") or {}
    return (meta.get("namespace") or "default", meta.get("name") or "")


def engine(body: dict) -> str:
    return str(((body.get("spec") or {}).get("engine") or {}).get("type") or "vllm-ascend")


async def kv_transfer_conditions(
    prometheus: Prometheus, bodies: list[dict], at: float, window: float = KV_TRANSFER_WINDOW_SECONDS
) -> dict[Key, KVTransferStatus]:
    """The KVTransfer condition of every two-role fleet among ``bodies`` at time ``at``."""
    fleets = [body for body in bodies if two_roles(body)]
    decided = {
        key(body): no_engine_counter(engine(body)) for body in fleets if engine(body) not in VLLM_ENGINES
    }
    vllm = [key(body) for body in fleets if engine(body) in VLLM_ENGINES]
    if not vllm:
        return decided
    queries = vllm_queries(window)
    try:
        transferred = by_fleet(await prometheus.instant(queries.transferred, at))
        requests = by_fleet(await prometheus.instant(queries.requests, at))
    except Failed as failure:
        return decided | {
            k: decide_kv_transfer(None, None, window, (failure.reason, failure.message)) for k in vllm
        }
    return decided | {k: decide_kv_transfer(transferred.get(k), requests.get(k), window) for k in vllm}


def changes(body: dict, wanted: KVTransferStatus) -> bool:
    """Whether the stored condition differs in status or reason (the sentence's figures move every cycle, and
    rewriting the object for them alone would be a status write per fleet per cycle)."""
    current = get_condition((body.get("status") or {}).get("conditions") or [], CONDITION_KV_TRANSFER)
    return current is None or (current.get("status"), current.get("reason")) != (wanted.status, wanted.reason)


def record(kube: Kube, body: dict, wanted: KVTransferStatus, now: float) -> bool:
    """Write the condition into the object's status (resourceVersion as precondition, a few attempts); an Event
    when it turns False. True when written."""
    namespace, name = key(body)
    for _ in range(_WRITE_ATTEMPTS):
        try:
            fresh = kube.get(names.KIND, namespace, name)
        except NotFound:
            return False
        except KubeError as error:  # the rules' writes of this cycle are done; the next cycle tries again
            _log.warning("cannot read %s/%s to record KVTransfer: %s", namespace, name, error)
            return False
        if not changes(fresh, wanted):
            return False
        before = (fresh.get("status") or {}).get("conditions") or []
        conditions = set_condition(
            before, CONDITION_KV_TRANSFER, wanted.status, wanted.reason, wanted.message, now,
            (fresh.get("metadata") or {}).get("generation"),
        )  # fmt: skip
        guard = {"resourceVersion": fresh["metadata"]["resourceVersion"]}
        try:
            kube.patch(
                names.KIND,
                namespace,
                name,
                {"metadata": guard, "status": {"conditions": conditions}},
                "status",
            )
        except Conflict:
            continue
        except KubeError as error:
            _log.warning("cannot record KVTransfer of %s/%s: %s", namespace, name, error)
            return False
        if wanted.status == "False":
            kube.event({"apiVersion": names.API_VERSION, "kind": names.KIND, **fresh}, "Warning", wanted.reason,
                       wanted.message)  # fmt: skip
        return True
    return False


async def update_kv_transfer(
    prometheus: Prometheus,
    kube: Kube,
    bodies: list[dict],
    at: float,
    window: float = KV_TRANSFER_WINDOW_SECONDS,
) -> int:
    """Decide and, where it changed, write the KVTransfer condition of every two-role fleet; the writes made."""
    wanted = await kv_transfer_conditions(prometheus, bodies, at, window)
    written = 0
    for body in bodies:
        status = wanted.get(key(body)) if two_roles(body) else None
        if status is not None and changes(body, status):
            written += await asyncio.to_thread(record, kube, body, status, at)
    return written
