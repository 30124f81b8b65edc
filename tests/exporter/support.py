"""Helpers for exporter tests that run real processes: environments, ports, a stand-in npu-smi."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import ascend_fleet_exporter

HERE = Path(__file__).parent
DATA = HERE / "data"
# The exporter distribution's folder (its import root and pyproject.toml), as the engine images build it.
SOURCE_ROOT = Path(ascend_fleet_exporter.__file__).resolve().parents[1]

T = TypeVar("T")

FAKE_NPU_SMI = f"""#!{sys.executable}
import os, sys
from pathlib import Path

data = Path(os.environ["FAKE_NPU_SMI_DATA"])
args = sys.argv[1:]
if args == ["info", "-m"]:
    name = "map"
elif args[:3] == ["info", "-t", "usages"] and "-i" in args:
    name = "usages-" + args[args.index("-i") + 1]
else:
    sys.exit("unexpected arguments: %s" % args)
path = data / (name + ".txt")
if not path.exists():
    print("Error: The device does not exist.", file=sys.stderr)
    sys.exit(8)
sys.stdout.write(path.read_text())
"""


def install_fake_npu_smi(
    directory: Path, aicore_by_card: Mapping[int, int], chip_map: str = "map_910b"
) -> Path:
    """A ``npu-smi`` in ``directory/bin`` answering from recorded outputs; returns that bin directory.

    Card ``n`` reports the AICore percentage ``aicore_by_card[n]``; other cards do not exist. The
    script reads its outputs from ``$FAKE_NPU_SMI_DATA`` (``directory/npu-smi-data``, see child_env).
    """
    bin_dir, data = directory / "bin", directory / "npu-smi-data"
    bin_dir.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    (data / "map.txt").write_text((DATA / f"npu_smi_{chip_map}.txt").read_text())
    template = (DATA / "npu_smi_usages_910b.txt").read_text()
    for card, aicore in aicore_by_card.items():
        text = template.replace(
            "NPU ID                         : 3", f"NPU ID                         : {card}"
        )
        text = text.replace(
            "Aicore Usage Rate(%)           : 62", f"Aicore Usage Rate(%)           : {aicore}"
        )
        (data / f"usages-{card}.txt").write_text(text)
    binary = bin_dir / "npu-smi"
    binary.write_text(FAKE_NPU_SMI)
    binary.chmod(0o755)
    return bin_dir


def child_env(
    extra: Mapping[str, str] | None = None,
    *,
    python_path: list[Path] | None = None,
    npu_smi_dir: Path | None = None,
) -> dict[str, str]:
    """An environment for a child Python: ascend_fleet importable, exporter settings cleared."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ASCEND_FLEET_EXPORTER")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [*(python_path or []), SOURCE_ROOT])
    env["PYTHONUNBUFFERED"] = "1"
    if npu_smi_dir is not None:
        env["PATH"] = f"{npu_smi_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["FAKE_NPU_SMI_DATA"] = str(npu_smi_dir / "npu-smi-data")
    env.update(extra or {})
    return env


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether ``port`` could be bound (on all addresses) right now, as the exporter binds it."""
    with socket.socket() as probe:
        # Like the exporter: closed scrape connections in TIME_WAIT must not count as "taken".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True
