"""Operator settings that would spin a core or split a request are refused at load, each with one line."""

from __future__ import annotations

import pytest

from ascend_fleet.cli.documents import DocumentError
from ascend_fleet.cli.inputs import read_settings
from tests.hostile.conftest import CORPUS, expected, validate_in_child
from tests.support.paths import EXAMPLES


def refusal(tmp_path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(DocumentError) as refused:
        read_settings(str(path), {})
    message = str(refused.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}: not a usable operator configuration: ")


@pytest.mark.parametrize(
    ("section", "field", "default"),
    [
        ("control", "interval", "15s"),
        ("control", "step", "15s"),
        ("prometheus", "timeout", "10s"),
        ("reconcile", "resyncInterval", "30s"),
        ("reconcile", "watchTimeout", "5m"),
        ("reconcile", "backoffInitial", "30s"),
        ("reconcile", "backoffMax", "10m"),
    ],
)
def test_a_zero_duration_is_refused(tmp_path, section, field, default):
    assert refusal(tmp_path, f"{section}:\n  {field}: 0s\n") == (
        f"{section}.{field}: 0s is not above zero, and the operator would repeat without a pause, keeping a core "
        f"busy; use a positive duration such as the default {default}"
    )


def test_zero_interval_and_step_are_two_sentences_on_one_line(tmp_path):
    message = refusal(tmp_path, "control:\n  interval: 0s\n  step: 0s\n")
    assert message.count("is not above zero") == 2


def test_a_header_with_a_line_break_is_refused(tmp_path):
    assert refusal(tmp_path, 'prometheus:\n  headers:\n    X-Scope-OrgID: "a\\r\\nX-Evil: 1"\n') == (
        "prometheus.headers: the value of X-Scope-OrgID holds a line break or NUL, which would end the header "
        "early; keep it on one line"
    )


def test_a_header_name_that_is_not_a_token_is_refused(tmp_path):
    message = refusal(tmp_path, 'prometheus:\n  headers:\n    "X-A: b": c\n')
    assert message.startswith("prometheus.headers: the header name 'X-A: b' is not an HTTP field name")


def test_unknown_keys_are_refused(tmp_path):
    assert refusal(tmp_path, "control:\n  intervall: 30s\n") == (
        "control.intervall: unknown field (check its spelling; see the chart's values.yaml)"
    )


def test_duplicate_keys_are_refused(tmp_path):
    assert refusal(tmp_path, "control:\n  interval: 30s\n  interval: 0s\n") == (
        "not valid YAML: the key 'interval' is set twice in one mapping (line 2 and line 3); kubectl refuses "
        "duplicate keys, keep one at line 3, column 3"
    )


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path):
    assert refusal(tmp_path, "- control\n") == "the file holds a list, not a mapping of settings"


def test_a_zero_interval_from_the_environment_is_refused(tmp_path):
    with pytest.raises(DocumentError, match="control.interval: 0s is not above zero"):
        read_settings(None, {"ASCEND_FLEET_CONTROL_INTERVAL": "0s"})


def test_the_defaults_load():
    assert read_settings(None, {}).control.interval == 15.0


SETTINGS_CORPUS = sorted((CORPUS.parent / "settings").glob("*.yaml"))


@pytest.mark.parametrize("path", SETTINGS_CORPUS, ids=[p.name for p in SETTINGS_CORPUS])
def test_hostile_settings_files_get_one_line_from_validate(path):
    """``validate --config`` reads settings as the operator does: each hostile file gets exit 2, one line."""
    done = validate_in_child("--config", str(path), str(EXAMPLES[0]))
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(lines) == 1, lines
    assert expected(path) in lines[0]


def test_the_settings_corpus_covers_every_duration_the_operator_repeats_by():
    names = {p.stem for p in SETTINGS_CORPUS}
    assert len(names) >= 20
    for field in ("interval", "step", "resync", "watch-timeout", "backoff", "timeout"):
        assert any(field in name and "zero" in name for name in names), field
