"""Who may use ``/memory-snapshot``: a bearer token when a token file is set, else loopback peers only.

The exporter's port is open to the cluster for Prometheus's scrapes, and a snapshot request makes every
engine process write into the pod's memory-backed ``/dev/shm``, so the snapshot path is not for anyone who
reaches the port:

- with ``ASCEND_FLEET_EXPORTER_SNAPSHOT_TOKEN_FILE`` set, every request (loopback ones too) carries
  ``Authorization: Bearer <the file's content>``, compared in constant time; the file is read again for
  every request, so a rotated Secret applies at once, and an unreadable or empty file shuts the door;
- without it, only peers on the pod's loopback are answered: ``kubectl port-forward`` (the container
  runtime connects to the port from inside the pod's network namespace) and ``kubectl exec ... curl``.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ascend_fleet_exporter.config import ENV_SNAPSHOT_TOKEN_FILE
from ascend_fleet_exporter.snapshot import Answer

# A token is a line of text; a file larger than this is not one (and is not read whole).
MAX_TOKEN_BYTES = 4096
BEARER = "bearer"


def is_loopback(host: str) -> bool:
    """Whether a peer address is the pod's own loopback (``127.0.0.0/8``, ``::1``, or IPv4 mapped into IPv6)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def read_token(path: Path) -> bytes | None:
    """The token in ``path`` without surrounding white space, or None when unreadable, empty or too large."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError:
        return None
    token = raw.strip()
    return token if token and len(raw) <= MAX_TOKEN_BYTES else None


@dataclass(frozen=True)
class SnapshotDoor:
    """The check in front of ``/memory-snapshot``."""

    token_file: Path | None = None

    def refusal(self, peer: str, authorization: str | None) -> Answer | None:
        """None when the request may pass, else the answer that refuses it (401, 403 or 503)."""
        if self.token_file is None:
            if is_loopback(peer):
                return None
            return Answer(
                403,
                "memory snapshots are answered on the pod's loopback only: use kubectl port-forward or "
                f"kubectl exec, or set {ENV_SNAPSHOT_TOKEN_FILE} to accept a bearer token from elsewhere\n",
            )
        token = read_token(self.token_file)
        if token is None:
            return Answer(
                503,
                f"the snapshot token file ({ENV_SNAPSHOT_TOKEN_FILE}) cannot be read or is empty; no snapshot "
                "request is answered until it holds a token\n",
            )
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != BEARER or not hmac.compare_digest(given.strip().encode(), token):
            return Answer(401, "memory snapshots need Authorization: Bearer <the snapshot token>\n")
        return None
