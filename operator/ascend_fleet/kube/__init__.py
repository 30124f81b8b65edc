"""The one Kubernetes client the operator uses (the official ``kubernetes`` package), kept thin."""

from .client import AlreadyExists, Conflict, Kube, KubeError, NotFound, Request, RequestHook
from .wait import WaitTimeout, scaled, time_scale, wait_for

__all__ = [
    "AlreadyExists",
    "Conflict",
    "Kube",
    "KubeError",
    "NotFound",
    "Request",
    "RequestHook",
    "WaitTimeout",
    "scaled",
    "time_scale",
    "wait_for",
]
