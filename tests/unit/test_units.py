import ast
from decimal import Decimal
from pathlib import Path

import pytest

import ascend_fleet
from ascend_fleet.api.k8s import parse_quantity
from ascend_fleet.api.units import (
    format_duration,
    format_seconds,
    format_threshold,
    parse_duration,
    parse_rule_threshold,
    parse_step,
    parse_threshold,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("5min", 300),
        ("1h", 3600),
        ("1h30m", 5400),
        ("250ms", 0.25),
        (45, 45),
        ("0s", 0),
    ],
)
def test_durations_in_every_accepted_form(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["5", "five minutes", "5 m", "-5m", "", "5d", True, None, [1]])
def test_bad_durations_say_what_fits(bad):
    with pytest.raises(ValueError, match="30s, 5m, 5min or 1h|zero or more"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"), [(300, "5m"), (5400, "1h30m"), (30, "30s"), (0, "0s"), (0.5, "0.5s")]
)
def test_durations_format_back(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    ("value", "number"), [("85%", 0.85), (0.85, 0.85), ("0.85", 0.85), (12, 12.0), ("100%", 1.0)]
)
def test_thresholds_as_ratio_or_percentage(value, number):
    assert parse_threshold(value) == pytest.approx(number)


@pytest.mark.parametrize("bad", ["150%", "-5%", "high", -0.1, float("nan"), True])
def test_bad_thresholds(bad):
    with pytest.raises(ValueError, match="threshold|range"):
        parse_threshold(bad)


@pytest.mark.parametrize(
    ("value", "number"), [("1s", 1.0), ("500ms", 0.5), ("1m30s", 90.0), ("85%", 0.85), (2, 2.0)]
)
def test_rule_thresholds_take_durations_as_seconds(value, number):
    assert parse_rule_threshold(value) == pytest.approx(number)


@pytest.mark.parametrize("bad", ["1x", "500 ms", "150%", "-1s"])
def test_bad_rule_thresholds_name_every_form(bad):
    with pytest.raises(ValueError, match="500ms|range"):
        parse_rule_threshold(bad)


def test_the_tune_thresholds_take_no_duration():
    with pytest.raises(ValueError):
        parse_threshold("1s")


@pytest.mark.parametrize(
    ("value", "step"),
    [(25, 25), ("25%", 25), ("12.5%", 13), ("0.5%", 1), ("99.01%", 100), ("100%", 100), (40.0, 40)],
)
def test_steps_round_a_fraction_up_as_the_hpa_does(value, step):
    assert parse_step(value) == step


@pytest.mark.parametrize("bad", [0, 101, "0%", "0.0%", "100.5%", "25", 12.5, True, "-5%"])
def test_bad_steps(bad):
    with pytest.raises(ValueError, match="not a step"):
        parse_step(bad)


def test_latency_display():
    assert format_seconds(0.5) == "500ms"
    assert format_seconds(1.0) == "1s"
    assert format_seconds(90) == "1m30s"


def test_threshold_display():
    assert format_threshold(0.85) == "85%"
    assert format_threshold(12) == "12"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16Gi", Decimal(16 * 2**30)),
        ("512M", Decimal(512 * 10**6)),
        ("500m", Decimal("0.5")),
        ("1e3", Decimal(1000)),
        ("2", Decimal(2)),
        (1073741824, Decimal(2**30)),
    ],
)
def test_quantities_as_the_server_reads_them(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1K", "NaN", "16 Gi", "16gi", True, None])
def test_quantities_the_server_refuses_are_refused(text):
    with pytest.raises(ValueError, match="is not a quantity"):
        parse_quantity(text)


def test_pure_code_takes_only_the_quantity_module_from_the_kubernetes_client():
    """The import contracts let api/k8s.py import ``kubernetes``; this pins it to the quantity module."""
    package = Path(ascend_fleet.__file__).parent
    imported = set()
    for path in (package / "api").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kubernetes"):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name.startswith("kubernetes"))
    assert imported == {"kubernetes.utils.quantity"}
