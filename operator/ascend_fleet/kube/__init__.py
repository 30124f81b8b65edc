"""The one Kubernetes client the operator uses (the official ``kubernetes`` package), kept thin."""

from .client import AlreadyExists, Conflict, Kube, KubeError, NotFound

__all__ = ["AlreadyExists", "Conflict", "Kube", "KubeError", "NotFound"]
