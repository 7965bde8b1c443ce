from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from corral.domain.config import ConfigError, Duration, format_duration, parse_duration
from corral.domain.config.common import CommonProvider
from corral.domain.config.loader import validate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m", 300.0),
        ("90s", 90.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("2d", 172800.0),
        ("1m30s", 90.0),
        (" 5M ", 300.0),
        ("0", 0.0),
        ("42", 42.0),
        ("2.5", 2.5),
        (30, 30.0),
        (1.5, 1.5),
        (0, 0.0),
    ],
)
def test_every_duration_form(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert TypeAdapter(Duration).validate_python(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["5x", "m5", "", "1h 30m", "-5s", -1, True, [], "five minutes"])
def test_bad_durations_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


def test_bad_duration_message_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        validate(CommonProvider, {"max_idle_agent_period": "5 minutes"})
    assert [str(p) for p in info.value.problems] == [
        "max_idle_agent_period: invalid duration '5 minutes': use seconds or a duration "
        "such as 90s, 5m, 1h30m, 250ms"
    ]


def test_zero_starting_period_is_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        validate(CommonProvider, {"max_agent_starting_period": "0s"})
    assert str(info.value) == "max_agent_starting_period: must be > 0"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(30, "30s"), (300, "5m"), (5400, "1h30m"), (0.25, "250ms"), (0, "0s"), (3600, "1h")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)
