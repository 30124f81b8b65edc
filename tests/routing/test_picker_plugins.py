"""The Go tests of the picker's own plugins (tools/epp: the variant filter, the prompt-length classifier, the
prefill/decode plugins and the adaptive in-flight limit), run by the Go toolchain against the picker release go.mod pins. Skipped without Go;
under ``CI=true`` that fails."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(900)


def test_the_picker_plugins_pass_their_go_tests():
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the picker plugins' Go tests: no Go toolchain on PATH")
        pytest.skip("no Go toolchain: the picker plugins' Go tests are skipped (CI runs them)")
    done = subprocess.run(
        [go, "test", "-count=1", "./..."],
        cwd=ROOT / "tools" / "epp",
        capture_output=True,
        text=True,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for package in ("variants", "classify", "disaggregation", "adaptive"):
        assert f"ascend-fleet.dev/epp/{package}" in done.stdout
