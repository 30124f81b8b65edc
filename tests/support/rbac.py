"""What the operator asks of the API: (API group, resource, verb) triples, recorded across test suites.

The local API logs every HTTP request; the operator's own come from kopf (User-Agent ``kopf/...``) and
from its client (``ascend-fleet-operator``). Test harness clients identify themselves as ``HARNESS``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

HARNESS = "ascend-fleet-tests"
OPERATOR_AGENTS = ("kopf/", "ascend-fleet-operator")
OBSERVED: set[tuple[str, str, str]] = set()
SUITES: set[str] = set()  # which suites recorded: the "nothing unused" check needs all of them


def rbac_triple(method: str, url: str) -> tuple[str, str, str] | None:
    """(group, resource[/subresource], verb) of a request, or None for discovery and other non-resource URLs."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    query = parse_qs(urlsplit(url).query)
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        verb = "watch" if query.get("watch", [""])[0] in ("true", "1") else ("get" if name else "list")
    else:
        verb = {
            "POST": "create",
            "PATCH": "patch",
            "PUT": "update",
            "DELETE": "delete" if name else "deletecollection",
        }[method]
    return group, resource, verb


def record_operator_requests(cluster, suite: str) -> None:
    """Add the operator's requests served by ``cluster`` (a DevCluster) to OBSERVED."""
    SUITES.add(suite)
    for request in cluster.emulator.served_requests():
        agent = {k.lower(): v for k, v in (request.headers or {}).items()}.get("user-agent", "")
        if agent.startswith(OPERATOR_AGENTS):
            triple = rbac_triple(str(request.method.value), str(request.url))
            if triple:
                OBSERVED.add(triple)


def audit_events(audit_log) -> Iterator[dict]:
    """Every event of a real API server's audit log (JSON lines at the Metadata level)."""
    with open(audit_log) as lines:
        for line in lines:
            yield json.loads(line)


def audited_requests(audit_log, username: str) -> set[tuple[str, str, str]]:
    """(group, resource[/subresource], verb) of every request ``username`` made, from a real API server's
    audit log."""
    triples = set()
    for event in audit_events(audit_log):
        ref = event.get("objectRef")
        if event.get("user", {}).get("username") != username or not ref or not ref.get("resource"):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        triples.add((ref.get("apiGroup", ""), resource, event["verb"]))
    return triples
