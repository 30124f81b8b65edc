"""The ``KVTransfer`` condition of a two-role fleet, read through Prometheus (the edge of
:mod:`ascend_fleet.status.kv_transfer`, which decides).

:func:`kv_transfer_condition` is the one hook: given a fleet with ``spec.disaggregation``, it asks Prometheus
the decode engines' two increases and returns the condition's status, reason and sentence; the control loop
writes it beside ``MetricsAvailable`` when it changes.
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
    KVTransferStatus,
    decide,
    no_engine_counter,
    vllm_queries,
)
from .prometheus import Failed, Prometheus

_log = logging.getLogger(__name__)
VLLM_ENGINES = frozenset({"vllm-ascend"})
WRITE_ATTEMPTS = 3


def two_roles(body: dict) -> bool:
    """Whether the object runs prefill and decode apart (``spec.disaggregation`` set)."""
    return bool((body.get("spec") or {}).get("disaggregation"))


def scalar(result: list) -> float | None:
    """The one value of a ``sum(...)`` answer; None when no series matched (an empty vector)."""
    if not result:
        return None
    try:
        return float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


async def kv_transfer_condition(
    prometheus: Prometheus, body: dict, at: float, window: float = KV_TRANSFER_WINDOW_SECONDS
) -> KVTransferStatus:
    """The KVTransfer condition of one two-role fleet at time ``at``."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    engine = str((spec.get("engine") or {}).get("type") or "vllm-ascend")
    if engine not in VLLM_ENGINES:
        return no_engine_counter(engine)
    queries = vllm_queries(meta.get("namespace") or "default", meta.get("name") or "", window)
    try:
        transferred = scalar(await prometheus.instant(queries.transferred, at))
        requests = scalar(await prometheus.instant(queries.requests, at))
    except Failed as failure:
        return decide(None, None, window, (failure.reason, failure.message))
    return decide(transferred, requests, window)


def changes(body: dict, wanted: KVTransferStatus) -> bool:
    """Whether the stored condition differs in status or reason (the sentence's figures move every cycle, and
    rewriting the object for them alone would be a status write per fleet per cycle)."""
    current = get_condition((body.get("status") or {}).get("conditions") or [], CONDITION_KV_TRANSFER)
    return current is None or (current.get("status"), current.get("reason")) != (wanted.status, wanted.reason)


def record(kube: Kube, body: dict, wanted: KVTransferStatus, now: float) -> bool:
    """Write the condition into the object's status (resourceVersion as precondition, a few attempts); an Event
    when it turns False. True when written."""
    meta = body.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
    for _ in range(WRITE_ATTEMPTS):
        try:
            fresh = kube.get(names.KIND, namespace, name)
        except NotFound:
            return False
        if not changes(fresh, wanted):
            return False
        before = (fresh.get("status") or {}).get("conditions") or []
        conditions = set_condition(
            before, CONDITION_KV_TRANSFER, wanted.status, wanted.reason, wanted.message, now,
            (fresh.get("metadata") or {}).get("generation"),
        )  # fmt: skip
        patch = {"metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"]}}
        try:
            kube.patch(names.KIND, namespace, name, {**patch, "status": {"conditions": conditions}}, "status")
        except Conflict:
            continue
        except KubeError as error:
            _log.warning("cannot record KVTransfer of %s/%s: %s", namespace, name, error)
            return False
        if wanted.status == "False":
            kube.event(fresh, "Warning", wanted.reason, wanted.message)
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
    written = 0
    for body in bodies:
        if not two_roles(body) or (body.get("metadata") or {}).get("deletionTimestamp"):
            continue
        wanted = await kv_transfer_condition(prometheus, body, at, window)
        if changes(body, wanted):
            full = {"apiVersion": names.API_VERSION, "kind": names.KIND, **body}
            written += await asyncio.to_thread(record, kube, full, wanted, at)
    return written
