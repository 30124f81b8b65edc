"""Three distributions from one repository: the operator's wheel holds no dev-kit module, the exporter's wheel
holds only the exporter and runs with none of the operator's packages, and the engine images install only it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.support.paths import ROOT

DISTRIBUTIONS = {
    "ascend_fleet": ROOT,
    "ascend_fleet_exporter": ROOT / "operator" / "exporter",
    "ascend_fleet_dev": ROOT / "operator" / "devkit",
}
# What an engine image must run without: the operator's packages and its Kubernetes and model libraries.
NOT_IN_ENGINE_IMAGES = ("ascend_fleet", "ascend_fleet_dev", "kopf", "kubernetes", "pydantic", "kmock", "yaml")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--wheel-dir",
            str(folder),
            *(str(source) for source in DISTRIBUTIONS.values()),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    found = {path.name.split("-")[0]: path for path in folder.glob("*.whl")}
    assert sorted(found) == sorted(DISTRIBUTIONS), found
    return found


def _top_levels(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/")[0] for name in archive.namelist() if ".dist-info/" not in name}


def _requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        return Parser().parsestr(archive.read(metadata).decode()).get_all("Requires-Dist") or []


def test_each_wheel_holds_its_own_package_only(wheels: dict[str, Path]) -> None:
    for package, wheel in wheels.items():
        assert _top_levels(wheel) == {package}, (wheel.name, _top_levels(wheel))
    with zipfile.ZipFile(wheels["ascend_fleet"]) as archive:
        names = archive.namelist()
    assert not [name for name in names if "devcluster" in name or "/demo/" in name or "exporter/" in name]


def test_the_exporter_depends_on_prometheus_client_alone(wheels: dict[str, Path]) -> None:
    assert [r.split(">")[0].strip() for r in _requirements(wheels["ascend_fleet_exporter"])] == [
        "prometheus-client"
    ]
    assert not any(
        r.startswith(("ascend-fleet-exporter", "ascend-fleet-dev"))
        for r in _requirements(wheels["ascend_fleet"])
    )


# Imports every exporter module from the installed wheel with the operator's packages made unimportable.
_BLOCKED_IMPORT = """
import importlib, importlib.abc, pkgutil, sys
BLOCKED = set(sys.argv[1].split(","))
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocked())
import ascend_fleet_exporter
assert ascend_fleet_exporter.__file__.startswith(sys.argv[2]), ascend_fleet_exporter.__file__
for module in pkgutil.iter_modules(ascend_fleet_exporter.__path__):
    importlib.import_module(f"ascend_fleet_exporter.{module.name}")
from ascend_fleet_exporter import vllm_plugin
vllm_plugin.register()
print(len(list(pkgutil.iter_modules(ascend_fleet_exporter.__path__))))
"""


def test_the_exporter_wheel_runs_without_the_operator(wheels: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheels["ascend_fleet_exporter"]),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, ",".join(NOT_IN_ENGINE_IMAGES), str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) >= 10


@pytest.mark.parametrize("image", ["vllm-ascend", "sglang"])
def test_the_engine_images_install_the_exporter_distribution_only(image: str) -> None:
    text = (ROOT / "images" / image / "Dockerfile").read_text()
    assert "COPY operator/exporter/ exporter/" in text
    assert "pip wheel --no-deps --wheel-dir /wheels ./exporter" in text
    assert "COPY operator/ " not in text and "COPY pyproject.toml" not in text


def test_the_three_distributions_release_one_version() -> None:
    versions = {
        package: tomllib.loads((source / "pyproject.toml").read_text())["project"]["version"]
        for package, source in DISTRIBUTIONS.items()
    }
    assert len(set(versions.values())) == 1, versions
    version = versions["ascend_fleet"]
    devkit = tomllib.loads((DISTRIBUTIONS["ascend_fleet_dev"] / "pyproject.toml").read_text())["project"]
    assert {f"ascend-fleet=={version}", f"ascend-fleet-exporter=={version}"} <= set(devkit["dependencies"])
    release = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert "operator/exporter/pyproject.toml" in release and "operator/devkit/pyproject.toml" in release
