"""One reconcile pass against the API: validate, plan, write the difference, record events and status."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field

from ..api import names
from ..api.catalog import Catalog
from ..api.settings import ControlSettings, OperatorSettings
from ..kube import AlreadyExists, Conflict, Kube, KubeError, NotFound
from ..layout import plan_roles
from ..observed import observed_replicas
from ..promql.guarded import parse_guarded
from ..render import InvalidSpec, validate
from ..render.routing import PickerSettings
from ..status.conditions import CHILD_REJECTED, NAME_CONFLICT, sort_conditions
from ..status.derive import OTHER_WRITERS_KEYS, canonical_status
from ..telemetry import RECONCILES, REPLICAS
from .expectations import CREATE, DELETE, PATCH, Expectation
from .observe import ROUTING_CORE_KINDS, ROUTING_CRD_KINDS, is_picker_object, owned_by
from .plan import creation_event, plan_invalid, plan_pass
from .timing import SETTLE_AFTER_CONFLICT
from .writes import Event, Observed, PassPlan

_log = logging.getLogger(__name__)


class StatusConflict(Exception):
    """The object changed after this pass read it, so its status write was refused."""


@dataclass(frozen=True)
class Refused:
    """One create the server would not do, as the applier saw it."""

    kind: str
    name: str
    reason: str  # ChildRejected | NameConflict
    message: str


@dataclass
class PassOutcome:
    """What a pass's writes did, filled in as they happen (kept even when a later write raises)."""

    expectations: list[Expectation] = field(default_factory=list)
    created: list[dict] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)


@dataclass
class PassResult:
    """What a pass did, for the caller's loop: when to look again and the object as last written."""

    requeue_after: float | None
    wrote: bool
    written: dict | None = None  # the object returned by our status write, if any
    outcome: PassOutcome = field(default_factory=PassOutcome)


def with_default_image(body: dict, settings: OperatorSettings) -> dict:
    """The object with the operator's configured default image filled in (see OperatorSettings)."""
    return settings.with_default_image(body)


def reconcile_once(
    kube: Kube,
    body: dict,
    observed: Observed,
    settings: OperatorSettings,
    now: float | None = None,
    outcome: PassOutcome | None = None,
    hold_status_until: float | None = None,
) -> PassResult:
    """Bring one AscendInference's children to its spec and report what was done.

    ``outcome`` (the caller's, so it survives an API error half-way) collects the writes issued, for
    the caller's expectations, and the creates the server refused. Until ``hold_status_until`` (a
    short while after this object's last creates) a status that only reports pods still starting
    is not written yet (see :func:`status_can_wait`).
    """
    now = time.time() if now is None else now
    outcome = PassOutcome() if outcome is None else outcome
    meta = body["metadata"]
    valid = None
    try:
        valid = validate(
            with_default_image(body, settings),
            known_metrics=known_metrics(settings.control),
            max_window=settings.control.max_window,
            allow_host_path=settings.allow_host_path_models,
            parse_query=parse_guarded,
        )
    except InvalidSpec as error:
        result = plan_invalid(body, error.problems, now)
        kind = "invalid"
    if valid is not None:
        picker = PickerSettings(image=settings.routing.picker_image)
        result = plan_pass(
            valid.obj,
            valid.layout,
            observed,
            now,
            settings.reconcile,
            picker,
            settings.routing.enabled,
            warnings=valid.warnings,
            network=settings.network_policy,
        )
        kind = "changed" if result.writes_children else "converged"
        roles = plan_roles(valid.obj.spec).values()
        _export_gauges(meta, sum(r.data for r in roles) if roles else valid.layout.data, result, observed)
    try:
        hold = hold_status_until is not None and now < hold_status_until
        written = _apply(kube, body, result, outcome, hold)
    except StatusConflict:
        # Another writer (the control loop) changed the object since this pass read it: look again
        # shortly, from the newer object, instead of overwriting its status with an older one.
        RECONCILES.labels(kind).inc()
        return PassResult(SETTLE_AFTER_CONFLICT, True, None, outcome)
    RECONCILES.labels(kind).inc()
    requeue = result.requeue_after
    if outcome.refused:  # report the refusal in status on the next pass, without waiting for the resync
        requeue = min(requeue or SETTLE_AFTER_CONFLICT, SETTLE_AFTER_CONFLICT)
    if hold and written is None and result.status and result.status != canonical_status(body.get("status")):
        assert hold_status_until is not None  # ``hold`` is only true with a time to hold until
        requeue = min(requeue or hold_status_until - now, max(hold_status_until - now, 0.1))
    return PassResult(requeue, result.writes_children or written is not None, written, outcome)


def known_metrics(control: ControlSettings) -> frozenset[str]:
    """Metric names rules may use: the operator's catalog (a rule naming another one is an InvalidSpec)."""
    return _catalog_names(control.catalog_preset, tuple(sorted(control.catalog.items())))


@functools.lru_cache(maxsize=8)
def _catalog_names(preset: str, overrides: tuple[tuple[str, str], ...]) -> frozenset[str]:
    return Catalog.build(preset, dict(overrides)).names()


def _apply(kube: Kube, body: dict, result: PassPlan, outcome: PassOutcome, hold: bool = False) -> dict | None:
    namespace = body["metadata"]["namespace"]
    events = list(result.events)
    _create(kube, body, result.creates, outcome, events)
    created = creation_event(outcome.created)
    if created is not None:
        events.insert(0, created)
    for patch in result.patches:
        try:
            patched = kube.patch(patch.kind, namespace, patch.name, patch.body)
        except NotFound:
            _log.info("%s %s/%s vanished before it could be patched", patch.kind, namespace, patch.name)
            continue
        outcome.expectations.append(
            Expectation(
                PATCH,
                patch.kind,
                patch.name,
                time.time(),
                (patched.get("metadata") or {}).get("resourceVersion"),
            )
        )
    for delete in result.deletes:
        kube.delete(delete.kind, namespace, delete.name, 0 if delete.force else None)
        outcome.expectations.append(Expectation(DELETE, delete.kind, delete.name, time.time()))
    if status_can_wait(
        canonical_status(body.get("status")),
        result.status,
        created=bool(outcome.created) or hold,
        urgent=bool(result.deletes or outcome.refused),
    ):
        _record(kube, body, events)
        return None
    try:
        written = _write_status(kube, body, result)
    except StatusConflict:
        _record(kube, body, [e for e in events if not e.with_status])
        raise
    _record(kube, body, events)
    return written


PROGRESS_REASONS = frozenset({"ReplicasNotReady", "AllReplicasReady"})


def status_can_wait(stored: dict, new: dict, created: bool, urgent: bool) -> bool:
    """Whether a status write may be left to a later pass (pure).

    Right after creating children, a pass computes a status from before them ("0 replicas"), and the
    passes that follow see pods that are still starting: each a real but passing state, soon
    replaced by the one that matters (Ready). ``created``: this pass created children, or it runs
    within the short hold after such a pass; then such a status waits, and the one written reports
    the pods as they have come up. Nothing else waits: not Ready turning True, not a gang restart's
    record (its backoff must survive a restart of the operator), not a refusal or a Degraded change,
    not a change of Ready's reason (an invalid spec).
    """
    if not created or urgent or not new:
        return False
    if stored.get("groupRestarts", []) != new.get("groupRestarts", []):
        return False
    before = {c.get("type"): c for c in stored.get("conditions", [])}
    after = {c.get("type"): c for c in new.get("conditions", [])}
    ready = after.get("Ready") or {}
    if ready.get("status") == "True" or ready.get("reason") not in PROGRESS_REASONS:
        return False
    return (before.get("Degraded") or {}).get("status", "False") == (after.get("Degraded") or {}).get(
        "status", "False"
    )


def _create(kube: Kube, body: dict, creates: list[dict], outcome: PassOutcome, events: list[Event]) -> None:
    """Create the children; a refused one becomes a Refused record and a Warning Event, never a retry here.

    AlreadyExists means either our own earlier create (its response lost, or the cache behind): then
    we wait for the cache like for any create; or a foreign object holding the name: a NameConflict.
    """
    uid = body["metadata"].get("uid", "")
    namespace = body["metadata"]["namespace"]
    held: set[str] = set()  # replicas with a refused rank: the rest of that gang waits too
    for obj in creates:
        kind, name = obj["kind"], obj["metadata"]["name"]
        replica = (obj["metadata"].get("labels") or {}).get(names.LABEL_REPLICA) if kind == "Pod" else None
        if replica is not None and replica in held:
            continue
        try:
            kube.create(obj, exist_ok=False)
        except AlreadyExists:
            try:
                holder = kube.get(kind, namespace, name)
            except NotFound:  # gone in between: the next pass creates it
                continue
            if owned_by(holder, uid):
                outcome.expectations.append(Expectation(CREATE, kind, name, time.time()))
                continue
            refusal = Refused(kind, name, NAME_CONFLICT, _holder(holder))
        except KubeError as error:
            if not error.refused:
                raise
            refusal = Refused(kind, name, CHILD_REJECTED, f"{error.reason}: {error.message}")
        else:
            outcome.expectations.append(Expectation(CREATE, kind, name, time.time()))
            outcome.created.append(obj)
            continue
        outcome.refused.append(refusal)
        if replica is not None:
            held.add(replica)
        if refusal.reason == NAME_CONFLICT:
            events.append(
                Event(
                    "Warning",
                    NAME_CONFLICT,
                    f"{kind} {name} already exists and is not owned by "
                    f"this AscendInference ({refusal.message}); it is left alone",
                )
            )
        else:
            events.append(
                Event("Warning", CHILD_REJECTED, f"the API server refused {kind} {name}: {refusal.message}")
            )


def _holder(obj: dict) -> str:
    """Who controls a foreign object, in words."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    controller = next((r for r in refs if r.get("controller")), None)
    if controller:
        return f"controlled by {controller.get('kind')} {controller.get('name')}"
    return "not controlled by any object"


def _record(kube: Kube, body: dict, events: list) -> None:
    for event in events:
        kube.event(body, event.type, event.reason, event.message)


# Condition types this reconciler writes; the control loop owns MetricsAvailable, KVTransfer and status.actions.
OWN_CONDITIONS = frozenset({"Ready", "Progressing", "Degraded"})


def _write_status(kube: Kube, body: dict, result: PassPlan) -> dict | None:
    """Write the pass's status, guarded by the resourceVersion it was computed from.

    On a conflict (the control loop wrote in between) the write is retried once on the fresh object,
    keeping that object's conditions of other owners: this pass's children writes have happened, and
    the status that records them (a gang restart's backoff above all) must not be lost.
    """
    if not result.status or result.status == canonical_status(body.get("status")):
        return None
    # status.actions belongs to the control loop and status.tuning to `ascend-fleet tune`: a merge patch
    # without their keys keeps what is stored (a retry on a fresh object must not restore a stale copy).
    status = {k: v for k, v in result.status.items() if k not in OTHER_WRITERS_KEYS}
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


def _export_gauges(meta: dict, desired: int, result: PassPlan, observed: Observed) -> None:
    labels = (meta.get("namespace", ""), meta.get("name", ""))
    REPLICAS.labels(*labels, "desired").set(desired)
    REPLICAS.labels(*labels, "ready").set(result.status.get("readyReplicas", 0))
    draining = sum(1 for group in observed_replicas(observed.pods).values() if group.draining)
    REPLICAS.labels(*labels, "draining").set(draining)


def observe_routing(
    kube: Kube, namespace: str, name: str, uid: str
) -> tuple[dict[tuple[str, str], dict], frozenset]:
    """List the routing kinds (the edge: API reads) and keep what ``uid`` controls.

    Returns the owned objects by (kind, name) and the kinds whose API is not served (a list answered 404: the
    CRD is not installed). Label-selected lists are authoritative reads, so no expectations are needed for these
    kinds: the next pass sees this pass's creates.
    """
    selector = {names.LABEL_NAME: name}
    owned: dict[tuple[str, str], dict] = {}
    missing: set[str] = set()
    for kind in (*ROUTING_CRD_KINDS, *ROUTING_CORE_KINDS):
        try:
            items = kube.list(kind, namespace, selector)
        except NotFound:
            missing.add(kind)
            continue
        for item in items:
            if owned_by(item, uid) and (kind != "PodDisruptionBudget" or is_picker_object(item)):
                owned[(kind, item["metadata"]["name"])] = item
    return owned, frozenset(missing)
