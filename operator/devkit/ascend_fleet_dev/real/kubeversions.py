"""The Kubernetes minors the real control plane is built for, and which one a control plane runs.

``tools/controlplane/go.mod`` pins the default release; ``tools/controlplane/kube-MINOR/`` holds the module of
each other one (its k8s.io/kubernetes, staging modules and etcd server). The oldest is the chart's
``kubeVersion`` floor, and the suite of ``make test-oldest-kube`` runs on it (docs/decisions.md, "The chart's
kubeVersion").
"""

from __future__ import annotations

import os

DEFAULT_KUBE_MINOR = "1.34"
KUBE_MINORS = ("1.30", "1.34")
# Which minor a control plane started without one runs: `dev-cluster --real --kube-version` sets it, and the
# test suite on the oldest minor runs with it set.
KUBE_VERSION_ENV = "ASCEND_FLEET_KUBE_VERSION"


def chosen_minor(kube_version: str | None = None) -> str:
    """``kube_version``, else ``$ASCEND_FLEET_KUBE_VERSION``, else the default minor."""
    return kube_version or os.environ.get(KUBE_VERSION_ENV) or DEFAULT_KUBE_MINOR


def minor_number(kube_version: str) -> int:
    """30 for ``1.30``."""
    return int(kube_version.split(".")[1])
