import pytest

from ascend_fleet.api.units import format_duration, format_threshold, parse_duration, parse_threshold


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


def test_threshold_display():
    assert format_threshold(0.85) == "85%"
    assert format_threshold(12) == "12"
