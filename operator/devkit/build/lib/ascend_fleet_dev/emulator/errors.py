"""The API errors of the local Kubernetes API, rendered as ``v1 Status`` objects by kmock.

Messages and reasons follow the real API server's wording so that clients (kubectl, kopf, the official
client) classify them as they would against a cluster: ``NotFound``, ``AlreadyExists``, ``Conflict``...
"""

from __future__ import annotations

from typing import Any

import kmock


def status_error(
    code: int,
    reason: str,
    message: str,
    *,
    name: str | None = None,
    group: str | None = None,
    kind: str | None = None,
    causes: list[dict[str, str]] | None = None,
) -> kmock.KubernetesError:
    """An error that kmock renders as a ``Status`` with this code, reason, message and details."""
    details: dict[str, Any] = {
        key: value for key, value in (("name", name), ("group", group), ("kind", kind)) if value is not None
    }
    if causes:
        details["causes"] = causes
    return kmock.KubernetesError(status=code, reason=reason, message=message, details=details)


def not_found(
    group_resource: str, name: str | None = None, *, group: str = "", plural: str = ""
) -> kmock.KubernetesError:
    """404 for a missing object (``pods "x" not found``) or an unknown resource (no name)."""
    if name is None:
        return status_error(404, "NotFound", "the server could not find the requested resource")
    return status_error(
        404, "NotFound", f'{group_resource} "{name}" not found', name=name, group=group, kind=plural
    )


def already_exists(
    group_resource: str, name: str, *, group: str = "", plural: str = ""
) -> kmock.KubernetesError:
    """409 AlreadyExists for a create that collides with a live (or terminating) object."""
    return status_error(
        409, "AlreadyExists", f'{group_resource} "{name}" already exists', name=name, group=group, kind=plural
    )


def conflict(group_resource: str, name: str, *, group: str = "", plural: str = "") -> kmock.KubernetesError:
    """409 Conflict for a write whose resourceVersion (or uid precondition) is stale."""
    message = (
        f'Operation cannot be fulfilled on {group_resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    return status_error(409, "Conflict", message, name=name, group=group, kind=plural)


def invalid(kind: str, name: str, problems: list[str], *, group: str = "") -> kmock.KubernetesError:
    """422 Invalid with one cause per problem (``field: what is wrong``)."""
    message = f'{kind} "{name}" is invalid: ' + ", ".join(problems)
    causes = [
        {"reason": "FieldValueInvalid", "message": problem, "field": problem.split(":", 1)[0]}
        for problem in problems
    ]
    return status_error(422, "Invalid", message, name=name, group=group, kind=kind, causes=causes)


def unprocessable(message: str) -> kmock.KubernetesError:
    """422 for a patch that cannot be applied (e.g. a failed JSON-patch ``test``)."""
    return status_error(422, "UnprocessableEntity", message)


def bad_request(message: str) -> kmock.KubernetesError:
    """400 BadRequest for a malformed request."""
    return status_error(400, "BadRequest", message)


def method_not_allowed(message: str) -> kmock.KubernetesError:
    """405 for a verb the resource does not support."""
    return status_error(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> kmock.KubernetesError:
    """415 for a PATCH with a content type the server does not understand."""
    return status_error(
        415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}"
    )


def expired(message: str) -> kmock.KubernetesError:
    """410 Expired (Gone) for a watch or continue token older than the kept history."""
    return status_error(410, "Expired", message)


def status_object(error: kmock.KubernetesError) -> dict[str, Any]:
    """The ``v1 Status`` body of an API error."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": error.message or "",
        "reason": error.reason or "",
        "details": error.details or {},
        "code": error.status,
    }
