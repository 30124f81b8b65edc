"""Checkov on the rendered engine pods: what it still reports is what docs/engines.md explains (make test-engines)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support.paths import EXAMPLES, ROOT

CHECKOV = os.environ.get("ASCEND_FLEET_CHECKOV")
pytestmark = pytest.mark.skipif(
    not CHECKOV, reason="checkov runs under `make test-engines` (ASCEND_FLEET_CHECKOV)"
)


def documented() -> set[str]:
    """The check ids the docs' checkov table explains as inapplicable."""
    text = (ROOT / "docs" / "engines.md").read_text()
    section = text.split("## Checkov on engine pods", 1)[1]
    table = section.split("Fixed after the first run", 1)[0]
    return set(re.findall(r"^\| (CKV2?_K8S_\d+)", table, re.M)) | set(re.findall(r"/ (CKV2?_K8S_\d+)", table))


def test_checkov_findings_on_engine_pods_are_the_documented_ones(tmp_path):
    for example in EXAMPLES:
        rendered = subprocess.run(
            [sys.executable, "-m", "ascend_fleet.cli.main", "render", "-n", "ai", str(example)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
        (tmp_path / example.name).write_text(rendered)
    result = subprocess.run(
        [CHECKOV, "-d", str(tmp_path), "--framework", "kubernetes", "--quiet", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = {f["check_id"] for r in reports for f in r["results"]["failed_checks"]}
    passed = sum(r["summary"]["passed"] for r in reports)
    assert passed > 500, "checkov checked too little: did the render produce the pods?"
    assert failed - documented() == set(), "new checkov findings: fix them or explain them in docs/engines.md"
    # The demo example names namespace: default itself; the others are rendered into -n ai.
    defaults = {
        f["resource"] for r in reports for f in r["results"]["failed_checks"] if f["check_id"] == "CKV_K8S_21"
    }
    assert all(".default." in resource or resource.endswith(".default") for resource in defaults), defaults
