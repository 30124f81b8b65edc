"""One reconcile pass against the API: validate, plan, write the difference, record events and status."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

from ..api import names
from ..api.catalog import Catalog
from ..api.settings import ControlSettings, OperatorSettings
from ..kube import Conflict, Kube, NotFound
from ..render import InvalidSpec, validate
from ..status import replica_states
from ..status.conditions import sort_conditions
from ..telemetry import RECONCILES, REPLICAS
from .plan import Observed, Plan, plan, plan_invalid

log = logging.getLogger(__name__)
SETTLE_AFTER_CONFLICT = 0.5  # seconds; the watch delivers the newer object by then


class StatusConflict(Exception):
    """The object changed after this pass read it, so its status write was refused."""


@dataclass
class PassResult:
    """What a pass did, for the caller's loop: when to look again and the object as last written."""

    requeue_after: float | None
    wrote: bool
    written: dict | None = None  # the object returned by our status write, if any


def with_default_image(body: dict, settings: OperatorSettings) -> dict:
    """The object with the operator's configured default image filled in (see OperatorSettings)."""
    return settings.with_default_image(body)


def reconcile_once(
    kube: Kube, body: dict, observed: Observed, settings: OperatorSettings, now: float | None = None
) -> PassResult:
    """Bring one AscendInference's children to its spec and report what was done."""
    now = time.time() if now is None else now
    meta = body["metadata"]
    try:
        valid = validate(
            with_default_image(body, settings),
            known_metrics=known_metrics(settings.control),
            max_window=settings.control.max_window,
            allow_host_path=settings.allow_host_path_models,
        )
    except InvalidSpec as error:
        result = plan_invalid(body, error.problems, now)
        outcome = "invalid"
    else:
        result = plan(valid.obj, valid.layout, observed, now, settings.reconcile)
        outcome = "changed" if result.writes_children else "converged"
        _export_gauges(meta, valid.layout.data, result, observed)
    try:
        written = _apply(kube, body, result)
    except StatusConflict:
        # Another writer (the control loop) changed the object since this pass read it: look again
        # shortly, from the newer object, instead of overwriting its status with an older one.
        RECONCILES.labels(outcome).inc()
        return PassResult(SETTLE_AFTER_CONFLICT, True, None)
    RECONCILES.labels(outcome).inc()
    return PassResult(result.requeue_after, result.writes_children or written is not None, written)


def known_metrics(control: ControlSettings) -> frozenset[str]:
    """Metric names rules may use: the operator's catalog (a rule naming another one is an InvalidSpec)."""
    return _catalog_names(control.catalog_preset, tuple(sorted(control.catalog.items())))


@functools.lru_cache(maxsize=8)
def _catalog_names(preset: str, overrides: tuple[tuple[str, str], ...]) -> frozenset[str]:
    return Catalog.build(preset, dict(overrides)).names()


def _apply(kube: Kube, body: dict, result: Plan) -> dict | None:
    namespace = body["metadata"]["namespace"]
    for obj in result.creates:
        kube.create(obj)
    for patch in result.patches:
        try:
            kube.patch(patch.kind, namespace, patch.name, patch.body)
        except NotFound:
            log.info("%s %s/%s vanished before it could be patched", patch.kind, namespace, patch.name)
    for delete in result.deletes:
        kube.delete(delete.kind, namespace, delete.name)
    try:
        written = _write_status(kube, body, result)
    except StatusConflict:
        _record(kube, body, [e for e in result.events if not e.with_status])
        raise
    _record(kube, body, result.events)
    return written


def _record(kube: Kube, body: dict, events: list) -> None:
    for event in events:
        kube.event(body, event.type, event.reason, event.message)


# Condition types this reconciler writes; the control loop owns MetricsAvailable (and status.actions).
OWN_CONDITIONS = frozenset({"Ready", "Progressing", "Degraded"})


def _write_status(kube: Kube, body: dict, result: Plan) -> dict | None:
    """Write the pass's status, guarded by the resourceVersion it was computed from.

    On a conflict (the control loop wrote in between) the write is retried once on the fresh object,
    keeping that object's conditions of other owners: this pass's children writes have happened, and
    the status that records them (a gang restart's backoff above all) must not be lost.
    """
    if not result.status or result.status == (body.get("status") or {}):
        return None
    # status.actions belongs to the control loop: a merge patch without the key keeps the stored list.
    status = {k: v for k, v in result.status.items() if k != "actions"}
    meta = body["metadata"]
    try:
        return _patch_status(kube, meta, status, meta.get("resourceVersion"))
    except Conflict:
        pass
    try:
        fresh = kube.get(names.KIND, meta["namespace"], meta["name"])
    except NotFound:
        return None
    theirs = [
        c for c in (fresh.get("status") or {}).get("conditions", []) if c.get("type") not in OWN_CONDITIONS
    ]
    ours = [c for c in status.get("conditions", []) if c.get("type") in OWN_CONDITIONS]
    status = {**status, "conditions": sort_conditions(theirs + ours)}
    try:
        return _patch_status(kube, meta, status, fresh["metadata"].get("resourceVersion"))
    except Conflict:
        raise StatusConflict from None


def _patch_status(kube: Kube, meta: dict, status: dict, version: str | None) -> dict:
    patch: dict = {"status": status}
    if version:  # conditions is one list with two writers: never replace a newer one with ours
        patch["metadata"] = {"resourceVersion": version}
    return kube.patch(names.KIND, meta["namespace"], meta["name"], patch, "status")


def _export_gauges(meta: dict, desired: int, result: Plan, observed: Observed) -> None:
    labels = (meta.get("namespace", ""), meta.get("name", ""))
    REPLICAS.labels(*labels, "desired").set(desired)
    REPLICAS.labels(*labels, "ready").set(result.status.get("readyReplicas", 0))
    draining = sum(1 for group in replica_states(observed.pods).values() if group.draining)
    REPLICAS.labels(*labels, "draining").set(draining)
