"""Durations in config files: ``90s``, ``5m``, ``1h30m``, ``250ms``, ``1.5h`` or plain seconds.

Determined (written in Go) spells durations the Go way, so we accept Go's units and mixed forms
(``1h30m``); a bare number is seconds, which is what a JSON API client naturally sends. The
value is stored as float seconds so domain arithmetic never converts units.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, Field

from corral.domain.config.errors import field_error

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h|d)")
_HINT = "use seconds or a duration such as 90s, 5m, 1h30m, 250ms"


def parse_duration(value: object) -> float:
    """Seconds for a duration value; raises ``ValueError`` with a readable message."""
    if isinstance(value, bool):  # bool is an int: `true` is never a duration
        raise ValueError(f"invalid duration {value!r}: {_HINT}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value)
    else:
        raise ValueError(f"invalid duration {value!r}: {_HINT}")
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"invalid duration {value!r}: must be finite")
    if seconds < 0:
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    return seconds


def _parse_text(text: str) -> float:
    s = text.strip().lower()
    try:
        return float(s)
    except ValueError:
        pass
    pos, total = 0, 0.0
    while pos < len(s):
        match = _PART.match(s, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: {_HINT}")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos == 0:
        raise ValueError(f"invalid duration {text!r}: {_HINT}")
    return total


def format_duration(seconds: float) -> str:
    """Shortest readable form: 30s, 5m, 1h30m, 250ms (the inverse of `parse_duration`)."""
    if seconds < 1 and seconds != 0:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    if abs(seconds - whole) > 1e-9:
        return f"{seconds:g}s"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            out += f"{whole // size}{unit}"
            whole %= size
    if whole or not out:
        out += f"{whole}s"
    return out


def _validate(value: object) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise field_error(str(exc)) from exc


Duration = Annotated[float, BeforeValidator(_validate)]
"""A non-negative duration in seconds."""

PositiveDuration = Annotated[float, BeforeValidator(_validate), Field(gt=0)]
"""A duration in seconds that must be greater than zero."""
