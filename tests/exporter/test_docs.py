"""docs/exporter.md documents every metric and every setting."""

from ascend_fleet_exporter import config, metrics

from .support import SOURCE_ROOT

DOC = SOURCE_ROOT.parents[1] / "docs" / "exporter.md"


def test_every_metric_is_documented_with_its_type():
    text = DOC.read_text()
    for spec in metrics.DEVICE_METRICS:
        assert f"`{spec.name}`" in text, spec.name
        row = next(line for line in text.splitlines() if line.startswith(f"| `{spec.name}`"))
        assert f"| {spec.kind} |" in row, row
    assert f"`{metrics.EXPORTER_SCRAPE_ERRORS_TOTAL}`" in text


def test_every_setting_is_documented():
    text = DOC.read_text()
    for name in (
        config.ENV_ENABLED,
        config.ENV_PORT,
        config.ENV_INTERVAL,
        config.ENV_SPOOL_DIR,
        config.ENV_SNAPSHOTS,
        config.ENV_SNAPSHOT_TOKEN_FILE,
        config.ENV_SNAPSHOT_KEEP,
        config.ENV_SNAPSHOT_MAX_BYTES,
        config.PORT_NAME,
        config.SGLANG_LAUNCHER_MODULE,
        config.VLLM_PLUGIN_NAME,
    ):
        assert f"`{name}" in text, name
    assert str(config.DEFAULT_PORT) in text
