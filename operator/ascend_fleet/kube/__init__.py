"""The one Kubernetes client the operator uses (the official ``kubernetes`` package), kept thin."""

from .client import Conflict, Kube, KubeError, NotFound

__all__ = ["Conflict", "Kube", "KubeError", "NotFound"]
