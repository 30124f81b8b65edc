"""The snapshot endpoint's doors: off by default, then a bearer token or loopback only, and bounded files."""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ascend_fleet.kube import wait_for
from ascend_fleet_exporter.config import (
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_MAX_BYTES,
    ExporterConfig,
)
from ascend_fleet_exporter.door import SnapshotDoor, is_loopback
from ascend_fleet_exporter.runtime import Exporter
from ascend_fleet_exporter.snapshot import SNAPSHOTS_DIR, SnapshotTaker, request_snapshot, snapshot_dir

from .scrape import scrape
from .support import free_port
from .test_collectors import GOOD, Provider
from .test_snapshot import FakeTorchNpu

TOKEN = "s3cret-token-0123456789"


def call(
    port: int, method: str = "POST", token: str | None = None, host: str = "127.0.0.1", scheme: str = "Bearer"
) -> tuple[int, str, dict[str, str]]:
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    request = urllib.request.Request(
        f"http://{host}:{port}/memory-snapshot",
        data=b"" if method == "POST" else None,
        method=method,
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=2.0) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def snapshot_dirs(spool: Path) -> list[str]:
    root = spool / SNAPSHOTS_DIR
    return sorted(path.name for path in root.iterdir()) if root.is_dir() else []


def running(config: ExporterConfig, monkeypatch) -> Exporter:
    monkeypatch.setitem(sys.modules, "torch_npu", FakeTorchNpu())
    exporter = Exporter(config, Provider({3: GOOD}), None).start()
    wait_for(lambda: exporter.serving, 10, "the exporter's port")
    return exporter


def test_the_environment_leaves_snapshots_off_unless_asked():
    default = ExporterConfig.from_env({})
    assert (default.snapshots, default.snapshot_token_file) == (False, None)
    assert (default.snapshot_keep, default.snapshot_max_bytes) == (
        DEFAULT_SNAPSHOT_KEEP,
        DEFAULT_SNAPSHOT_MAX_BYTES,
    )
    on = ExporterConfig.from_env(
        {
            "ASCEND_FLEET_EXPORTER_SNAPSHOTS": "1",
            "ASCEND_FLEET_EXPORTER_SNAPSHOT_TOKEN_FILE": "/var/run/token",
            "ASCEND_FLEET_EXPORTER_SNAPSHOT_KEEP": "5",
            "ASCEND_FLEET_EXPORTER_SNAPSHOT_MAX_BYTES": "1000",
        }
    )
    assert (on.snapshots, on.snapshot_token_file, on.snapshot_keep, on.snapshot_max_bytes) == (
        True,
        Path("/var/run/token"),
        5,
        1000,
    )
    bad = ExporterConfig.from_env(
        {"ASCEND_FLEET_EXPORTER_SNAPSHOT_KEEP": "0", "ASCEND_FLEET_EXPORTER_SNAPSHOT_MAX_BYTES": "-1"}
    )
    assert (bad.snapshot_keep, bad.snapshot_max_bytes) == (DEFAULT_SNAPSHOT_KEEP, DEFAULT_SNAPSHOT_MAX_BYTES)


def test_off_by_default_the_path_is_not_there_and_nothing_is_written(tmp_path, monkeypatch):
    config = ExporterConfig(port=free_port(), interval=0.1, spool_dir=tmp_path / "spool")
    exporter = running(config, monkeypatch)
    try:
        assert call(config.port)[0] == 404
        assert call(config.port, "GET")[0] == 404
        assert scrape(config.port, "/metrics")[0]  # the port itself still serves metrics
        time.sleep(3 * config.interval)
    finally:
        exporter.stop()
    assert not (config.spool / "snapshot-request.json").exists()
    assert snapshot_dirs(config.spool) == []


@pytest.fixture
def with_token(tmp_path) -> ExporterConfig:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return ExporterConfig(
        port=free_port(),
        interval=0.1,
        spool_dir=tmp_path / "spool",
        snapshots=True,
        snapshot_token_file=token_file,
    )


def test_with_a_token_file_a_request_without_the_token_is_refused(with_token, monkeypatch):
    exporter = running(with_token, monkeypatch)
    try:
        for method in ("POST", "GET"):
            status, text, headers = call(with_token.port, method)
            assert status == 401 and headers.get("WWW-Authenticate") == "Bearer"
            assert "Authorization: Bearer" in text
        assert call(with_token.port, token="wrong")[0] == 401
        assert call(with_token.port, token=TOKEN[:-1])[0] == 401
        assert call(with_token.port, token=TOKEN, scheme="Basic")[0] == 401
        assert (
            snapshot_dirs(with_token.spool) == []
            and not (with_token.spool / "snapshot-request.json").exists()
        )

        status, text, _ = call(with_token.port, token=TOKEN)
        assert status == 202, text
        assert call(with_token.port, "GET", token=TOKEN)[0] == 200

        assert with_token.snapshot_token_file is not None
        with_token.snapshot_token_file.write_text("rotated")  # read again for every request
        assert call(with_token.port, token=TOKEN)[0] == 401
        assert call(with_token.port, token="rotated")[0] == 202
        with_token.snapshot_token_file.unlink()  # unreadable: the door stays shut
        status, text, _ = call(with_token.port, token="rotated")
        assert status == 503 and "cannot be read" in text
    finally:
        exporter.stop()


def outside_address() -> str | None:
    """An address of this host that is not loopback, if it has one (the route to a documentation address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if is_loopback(address) or address == "0.0.0.0" else address


def test_without_a_token_file_only_loopback_peers_are_answered(tmp_path, monkeypatch):
    address = outside_address()
    if address is None:
        pytest.skip("this host has no address besides loopback to call from")
    config = ExporterConfig(port=free_port(), interval=0.1, spool_dir=tmp_path / "spool", snapshots=True)
    exporter = running(config, monkeypatch)
    try:
        status, text, _ = call(config.port, host=address)
        assert status == 403 and "kubectl port-forward" in text
        assert call(config.port, "GET", host=address)[0] == 403
        assert call(config.port, token=TOKEN, host=address)[0] == 403  # no token file: a token opens nothing
        assert not (config.spool / "snapshot-request.json").exists()
        assert scrape(config.port, "/metrics")[0]
        assert call(config.port)[0] == 202  # the same port from loopback
    finally:
        exporter.stop()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"])
def test_loopback_addresses(host):
    assert is_loopback(host)
    assert SnapshotDoor().refusal(host, None) is None


@pytest.mark.parametrize(
    "host", ["10.0.0.7", "::ffff:10.0.0.7", "fe80::1%eth0", "2001:db8::1", "0.0.0.0", ""]
)
def test_other_addresses(host):
    assert not is_loopback(host)
    refused = SnapshotDoor().refusal(host, None)
    assert refused is not None and refused.status == 403


def test_a_huge_token_file_is_no_token(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("x" * 5000)
    refused = SnapshotDoor(token_file).refusal("127.0.0.1", "Bearer " + "x" * 5000)
    assert refused is not None and refused.status == 503


def test_at_most_keep_snapshots_stay_and_the_oldest_go_first(tmp_path, monkeypatch):
    fake = FakeTorchNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    taker = SnapshotTaker(tmp_path, pid=7, keep=2)
    made = []
    for second in range(5):
        answer = request_snapshot(tmp_path, 5.0, now=1_800_000_000.0 + second, keep=2)
        made.append(answer.text.split()[1])
        assert taker.take_if_requested() == snapshot_dir(tmp_path, made[-1]) / "7.pickle"
        assert len(snapshot_dirs(tmp_path)) <= 2
    assert snapshot_dirs(tmp_path) == made[-2:]  # the newest two; the three oldest removed
    assert len(fake.calls) == 5


def test_a_request_makes_room_before_any_process_answers(tmp_path):
    for second in range(4):
        request_snapshot(tmp_path, 5.0, now=1_800_000_000.0 + second, keep=3)
        snapshot_dir(tmp_path, f"2027{second}").mkdir(parents=True)  # as if every process had answered
    request_snapshot(tmp_path, 5.0, now=1_800_000_010.0, keep=3)
    assert snapshot_dirs(tmp_path) == ["20272", "20273"]  # two old ones, and room for the new one


def test_a_snapshot_over_the_bound_is_removed_with_a_note(tmp_path, monkeypatch):
    fake = FakeTorchNpu()
    fake.npu.memory._dump_snapshot = lambda path: Path(path).write_bytes(b"x" * 2000)
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    taker = SnapshotTaker(tmp_path, pid=7, max_bytes=1000)
    request_snapshot(tmp_path, 5.0, now=1_800_000_000.0)
    note = taker.take_if_requested()
    assert note is not None and note.name == "7.txt"
    assert "2000 bytes, over the 1000 bytes" in note.read_text()
    assert [p.name for p in note.parent.iterdir()] == ["7.txt"]


def test_posts_through_the_endpoint_keep_at_most_keep_snapshots(tmp_path, monkeypatch):
    config = ExporterConfig(
        port=free_port(), interval=0.05, spool_dir=tmp_path / "spool", snapshots=True, snapshot_keep=2
    )
    exporter = running(config, monkeypatch)
    ids = []
    try:
        for _ in range(4):
            status, text, _ = call(config.port)
            assert status == 202, text
            ids.append(text.split()[1])
            expected = snapshot_dir(config.spool, ids[-1]) / f"{exporter.pid}.pickle"
            wait_for(expected.exists, 10, "the snapshot file")
            time.sleep(0.002)  # request ids are milliseconds
    finally:
        exporter.stop()
    assert snapshot_dirs(config.spool) == ids[-2:]
