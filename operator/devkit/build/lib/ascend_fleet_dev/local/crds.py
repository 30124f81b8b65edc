"""Installing a CustomResourceDefinition on a local cluster, emulated or real, and waiting until it is served."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from ascend_fleet.kube import Kube

_CRD_TIMEOUT_SECONDS = 60.0


def install_crd(kube: Kube, crd: Mapping[str, Any], timeout: float = _CRD_TIMEOUT_SECONDS) -> None:
    """Create ``crd`` (kept if it exists) and wait until its resource lists.

    A real API server serves a new CRD's resource a moment after it is created (once Established); the
    emulator at once.
    """
    kube.create_crd(dict(crd))
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served", True))
    objects = kubernetes.client.CustomObjectsApi(kube.api)
    deadline = time.monotonic() + timeout
    while True:
        try:
            objects.list_cluster_custom_object(spec["group"], version, spec["names"]["plural"], limit=1)
            return
        except ApiException:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)
