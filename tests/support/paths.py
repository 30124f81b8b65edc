"""Where the repository's files are, for tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CRD_FILE = ROOT / "crds" / "inference.ascendfleet.io_ascendinferences.yaml"
