"""Every settle, hold, backoff and retry default of the reconciler and the operator, in one place.

Each constant says what it paces and, where the operator mirrors an upstream controller, the upstream
value beside it. Per-object tunables (replica restart backoff, resync interval, rule cooldowns) are
settings and spec fields, not constants: see ``api/settings.py`` and ``spec.autoscaling``.

Two settle times used to share one name (``SETTLE_SECONDS``, 0.5 in the handler and 1.0 in the planner).
They pace different things and keep their values: :data:`WATCH_SETTLE_SECONDS` is the least a
reconciler sleeps after its own writes before a wake-up may cut the sleep short (so the watch events of
those writes arrive in one batch, not one pass each), and :data:`REQUEUE_AFTER_WRITE_SECONDS` is when a
plan asks to look again after writing children (the watch has caught up by then, and expectations hold
the pass back if it has not).
"""

from __future__ import annotations

# The per-object loop (reconcile/object_loop.py).
WATCH_SETTLE_SECONDS = 0.5  # least sleep after our own writes before a wake-up may end it
# First retry and cap after an API error during a pass, doubling in between. controller-runtime's default
# per-item rate limiter starts at 5 ms and caps at 1000 s; a pass here is a whole object's worth of
# requests, so the first retry waits longer and the cap is shorter (an outage ends within 30 s of the API).
ERROR_BACKOFF = (1.0, 30.0)
# After a pass created children, a status that only says "pods still starting" waits this long (or until
# Ready): one status write for the whole start-up instead of one per pod that comes up.
STATUS_HOLD_SECONDS = 5.0

# The planner (reconcile/plan.py, reconcile/routing.py).
REQUEUE_AFTER_WRITE_SECONDS = 1.0  # look again after writing children or while old ones are going
# A rollout held by maxUnavailable looks again after this; the replicas it waits for wake it sooner.
ROLLOUT_BLOCKED_SECONDS = 5 * REQUEUE_AFTER_WRITE_SECONDS
MIN_REQUEUE_SECONDS = 0.1  # the shortest "look again" a plan asks for

# The applier (reconcile/apply.py).
SETTLE_AFTER_CONFLICT = 0.5  # after a refused status write (409) or a refused create: the watch catches up

# Expectations (reconcile/expectations.py). ReplicaSet's ExpectationsTimeout is 5 minutes; a lost watch
# event here holds one object's passes, so a minute is enough to fall back to a level-based pass.
EXPECTATIONS_TTL_SECONDS = 60.0

# The operator process (handlers/operator.py).
RESTART_BACKOFF = (1.0, 30.0)  # first restart of kopf after it stopped on an error, and the cap
# kopf's retries of one API request, then the last delay again for as long as the outage lasts (kopf's own
# default sequence is 1, 2, 5, 10, 30 seconds, after which it escalates and a failed watch stops the operator).
API_RETRY_DELAYS = (1.0, 2.0, 5.0, 10.0)

# Node death (reconcile/nodeleases.py). A kubelet renews its node's Lease in kube-node-lease every 10 s (a
# quarter of the Lease's 40 s duration); kube-controller-manager's node lifecycle controller calls a node
# unreachable after --node-monitor-grace-period without a renewal: 50 s since Kubernetes 1.32 (40 s before).
# Only then do a Service's endpoints lose its pods (Ready=False) and, after the pods' toleration, does the
# taint manager evict them, which on a dead node never completes. The operator calls a node dead after two
# renewals missed in a row: its serving leaders leave the Service and its replicas are made again elsewhere.
KUBELET_LEASE_RENEW_SECONDS = 10.0
NODE_MONITOR_GRACE_SECONDS = 50.0  # upstream default, for comparison; the operator does not wait for it
NODE_LEASE_STALE_SECONDS = 2 * KUBELET_LEASE_RENEW_SECONDS
# How often the operator lists the node Leases (from the API server's watch cache): a dead node is noticed
# at most this late after its Lease went stale.
NODE_LEASE_POLL_SECONDS = 1.0
# A list of the Leases later than this after the previous one (an API outage, a stalled operator) starts every
# node's clock again: a renewal may have come and gone unseen meanwhile.
NODE_LEASE_GAP_SECONDS = 5 * NODE_LEASE_POLL_SECONDS
