"""The real Helm library (helm-sdkpy) for the chart tests: lint, and install into a Kubernetes API.

helm-sdkpy runs Helm's Go code from a shared library. The Go runtime reads the environment once, when the
library loads, from the environment the process *started* with (``os.environ`` changes made later are not
seen), and Helm must see ``HELM_DRIVER=memory``: the local API cannot store Helm's protobuf release Secrets.
So every Helm call runs in a child process, ``python -m tests.chart.helm``, started with that variable; a crash
in the Go runtime then fails one test instead of killing pytest.

Two quirks of helm-sdkpy 0.1.x shape this module: ``Lint`` takes no values (so linting with other values lints
a copy of the chart whose values.yaml holds them), and lint messages come back without their text (a Go
``error`` marshals to ``{}``), so a failing lint is reported by file and severity.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import ROOT

CHART = ROOT / "charts" / "ascend-fleet"
VALUES_SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = ROOT / "tests" / "chart" / "values"
SEVERITIES = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
_TIMEOUT = 120


class HelmFailed(RuntimeError):
    """A Helm action failed; the message is Helm's."""


@dataclass(frozen=True)
class LintMessage:
    severity: str
    path: str


@dataclass(frozen=True)
class Release:
    """What ``helm install`` made: the manifest's objects in order, and the rendered NOTES.txt."""

    objects: list[dict[str, Any]]
    notes: str


def default_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def values_file(name: str) -> dict[str, Any]:
    """A values file of tests/chart/values/ (without the .yaml)."""
    return yaml.safe_load((VALUES / f"{name}.yaml").read_text()) or {}


def coalesce(base: Any, override: Any) -> Any:
    """Helm's merge of user values over the chart's: maps merge key by key, anything else replaces, null deletes."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = coalesce(merged.get(key), value)
    return merged


def merged_values(override: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values Helm renders with: the chart's defaults with ``override`` merged over them."""
    return coalesce(default_values(), override or {})


def _run(request: dict[str, Any], driver: str = "memory") -> Any:
    env = {**os.environ, "HELM_DRIVER": driver}
    done = subprocess.run(
        [sys.executable, "-m", "tests.chart.helm"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise HelmFailed(f"the Helm child process failed ({done.returncode}):\n{done.stderr[-4000:]}")
    answer = json.loads(done.stdout)
    if "error" in answer:
        raise HelmFailed(answer["error"])
    return answer["result"]


def lint(values: dict[str, Any] | None = None) -> list[LintMessage]:
    """Lint the chart, with its own values.yaml or with ``values`` merged over it; return every message."""
    with tempfile.TemporaryDirectory(prefix="chart-lint-") as tmp:
        chart = CHART
        if values is not None:
            chart = Path(tmp) / CHART.name
            shutil.copytree(CHART, chart)
            (chart / "values.yaml").write_text(yaml.safe_dump(merged_values(values), sort_keys=False))
        result = _run({"action": "lint", "chart": str(chart)})
    return [
        LintMessage(SEVERITIES.get(m["Severity"], str(m["Severity"])), m["Path"])
        for m in result["Messages"] or []
    ]


def install(
    kubeconfig: Path,
    release: str,
    namespace: str,
    values: dict[str, Any] | None = None,
    *,
    driver: str = "memory",
    chart: Path = CHART,
) -> Release:
    """``helm install`` the chart (no waiting; the namespace must exist).

    ``driver`` is Helm's release storage: ``secret`` (Helm's default) on a real API server, ``memory`` on the
    local emulator, which cannot store Helm's release Secrets. ``chart``: another copy of the chart (an older
    one, for an upgrade).
    """
    result = _run(
        {
            "action": "install",
            "chart": str(chart),
            "kubeconfig": str(kubeconfig),
            "release": release,
            "namespace": namespace,
            "values": values or {},
        },
        driver,
    )
    objects = [obj for obj in yaml.safe_load_all(result["manifest"]) if obj]
    return Release(objects, result["info"].get("notes", ""))


def upgrade(
    kubeconfig: Path,
    release: str,
    namespace: str,
    values: dict[str, Any] | None = None,
    *,
    driver: str = "memory",
    chart: Path = CHART,
) -> Release:
    """``helm upgrade --reuse-values`` a release to ``chart`` (no waiting)."""
    result = _run(
        {
            "action": "upgrade",
            "chart": str(chart),
            "kubeconfig": str(kubeconfig),
            "release": release,
            "namespace": namespace,
            "values": values or {},
        },
        driver,
    )
    objects = [obj for obj in yaml.safe_load_all(result["manifest"]) if obj]
    return Release(objects, result["info"].get("notes", ""))


def uninstall(kubeconfig: Path, release: str, namespace: str, *, driver: str = "memory") -> None:
    """``helm uninstall`` a release (its record must be in ``driver``'s storage: ``secret`` across processes)."""
    _run(
        {"action": "uninstall", "kubeconfig": str(kubeconfig), "release": release, "namespace": namespace},
        driver,
    )


# The child process ------------------------------------------------------------------------------------


async def _child(request: dict[str, Any]) -> Any:
    import helm_sdkpy

    if request["action"] == "lint":
        return await helm_sdkpy.Lint(helm_sdkpy.Configuration()).run(request["chart"])
    if request["action"] == "install":
        config = helm_sdkpy.Configuration(namespace=request["namespace"], kubeconfig=request["kubeconfig"])
        # create_namespace=True makes Helm download the OpenAPI document, which the local API does not serve.
        return await helm_sdkpy.Install(config).run(
            request["release"],
            request["chart"],
            values=request["values"],
            wait=False,
            create_namespace=False,
            timeout=60,
        )
    if request["action"] == "upgrade":
        config = helm_sdkpy.Configuration(namespace=request["namespace"], kubeconfig=request["kubeconfig"])
        return await helm_sdkpy.Upgrade(config).run(
            request["release"],
            request["chart"],
            values=request["values"],
            wait=False,
            timeout=60,
            reuse_values=True,
        )
    if request["action"] == "uninstall":
        config = helm_sdkpy.Configuration(namespace=request["namespace"], kubeconfig=request["kubeconfig"])
        return await helm_sdkpy.Uninstall(config).run(request["release"], wait=False, timeout=60)
    raise ValueError(f"unknown action {request['action']!r}")


def main() -> int:
    if os.environ.get("HELM_DRIVER") not in ("memory", "secret"):
        print("HELM_DRIVER (memory or secret) must be set when this process starts", file=sys.stderr)
        return 2
    request = json.loads(sys.stdin.read())
    try:
        answer = {"result": asyncio.run(_child(request))}
    except Exception as error:  # Helm's errors are of several helm_sdkpy types; the message is what matters
        answer = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
