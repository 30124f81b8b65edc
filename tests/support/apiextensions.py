"""The API server's own CRD validation, offline: ``tools/crdcheck`` built per Kubernetes minor.

The checker links ``k8s.io/apiextensions-apiserver`` of one release and runs ``ValidateCustomResourceDefinition``,
what a CRD create runs (structural schema, every CEL rule compiled, the CEL cost estimator's budgets), on CRD
files. It is built once per minor into the cache the control plane uses. Without Go it skips on a developer's
machine and fails under CI, which must have it.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ascend_fleet_dev.real.controlplane import ControlPlaneUnavailable, cached_go_build
from ascend_fleet_dev.real.kubeversions import DEFAULT_KUBE_MINOR

SOURCE = Path(__file__).resolve().parents[2] / "tools" / "crdcheck"


@dataclass(frozen=True)
class Verdict:
    """One CRD at one release: the release linked and the server's errors (``field: detail``)."""

    name: str
    release: str
    errors: list[str]


def crdcheck(minor: str) -> Path:
    """The checker of Kubernetes ``minor`` (``1.30``, ``1.34``), built when missing."""
    override = "ASCEND_FLEET_CRDCHECK_" + minor.replace(".", "_")
    try:
        return cached_go_build(
            SOURCE, "crdcheck", what=f"the {minor} CRD checker", override_env=override, make_target="test",
            build=True, progress=None, minor=None if minor == DEFAULT_KUBE_MINOR else minor,
        )  # fmt: skip
    except ControlPlaneUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to build the CRD checker: {error}")
        pytest.skip(str(error))


def validate_crds(minor: str, *files: Path) -> list[Verdict]:
    """What the API server of ``minor`` says to creating each CRD file."""
    result = subprocess.run(
        [str(crdcheck(minor)), *map(str, files)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode in (0, 1), result.stderr
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    return [
        Verdict(v["name"], v["release"], [f"{e['field']}: {e['detail']}" for e in v["errors"]])
        for v in verdicts
    ]
