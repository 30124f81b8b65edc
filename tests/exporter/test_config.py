"""Exporter settings from the environment."""

from pathlib import Path

import pytest

from ascend_fleet_exporter.config import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_PORT,
    ExporterConfig,
    default_spool_dir,
    exporter_enabled,
    parse_interval,
    parse_port,
    parse_visible_devices,
    pod_device,
)


@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        ("1", True),
        ("true", True),
        (" ON ", True),
        ("yes", True),
        ("0", False),
        ("", False),
        ("false", False),
        ("2", False),
    ],
)
def test_enable_switch(value, enabled):
    assert exporter_enabled({"ASCEND_FLEET_EXPORTER": value}) is enabled


def test_unset_means_off():
    assert not exporter_enabled({})


def test_defaults():
    config = ExporterConfig.from_env({})
    assert (config.port, config.interval, config.spool_dir) == (9410, 5.0, None)
    assert (DEFAULT_PORT, DEFAULT_INTERVAL_SECONDS) == (9410, 5.0)
    assert config.spool == default_spool_dir(9410)
    assert config.spool.name == "ascend-fleet-exporter-9410"


def test_settings_from_the_environment(tmp_path):
    config = ExporterConfig.from_env(
        {
            "ASCEND_FLEET_EXPORTER_PORT": "9500",
            "ASCEND_FLEET_EXPORTER_INTERVAL": "0.5",
            "ASCEND_FLEET_EXPORTER_DIR": str(tmp_path),
        }
    )
    assert (config.port, config.interval, config.spool) == (9500, 0.5, tmp_path)


def test_malformed_settings_fall_back_to_defaults_with_a_warning(caplog):
    config = ExporterConfig.from_env(
        {"ASCEND_FLEET_EXPORTER_PORT": "http", "ASCEND_FLEET_EXPORTER_INTERVAL": "-1"}
    )
    assert (config.port, config.interval) == (9410, 5.0)
    assert (
        "ASCEND_FLEET_EXPORTER_PORT='http' is not a TCP port (1..65535); using the default 9410"
        in caplog.text
    )
    assert "ASCEND_FLEET_EXPORTER_INTERVAL='-1' is not seconds > 0; using the default 5.0" in caplog.text


@pytest.mark.parametrize(
    ("text", "port"), [("9410", 9410), (" 1 ", 1), ("0", None), ("65536", None), ("x", None)]
)
def test_parse_port(text, port):
    assert parse_port(text) == port


@pytest.mark.parametrize(
    ("text", "seconds"), [("5", 5.0), ("0.25", 0.25), ("0", None), ("nan", None), ("inf", None)]
)
def test_parse_interval(text, seconds):
    assert parse_interval(text) == seconds


def test_spool_prefers_pod_shared_memory():
    spool = default_spool_dir(1234)
    shm = Path("/dev/shm")
    assert spool.parent == shm or not shm.is_dir()


@pytest.mark.parametrize(
    ("text", "devices"),
    [("2,3", [2, 3]), (" 6 , 1", [6, 1]), ("", None), (None, None), ("0,x", None), ("1,,2", None)],
)
def test_parse_visible_devices(text, devices):
    assert parse_visible_devices(text) == devices


def test_a_narrowed_process_reports_the_container_device_ids():
    assert [pod_device(local, [2, 3]) for local in (0, 1)] == [2, 3]
    assert pod_device(1, None) == 1
    assert pod_device(5, [2, 3]) == 5  # not a device the runtime would show it; keep its own id
