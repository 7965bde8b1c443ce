"""The rules a trial's metric point keeps (docs/metrics.md), defined once: the agent checks
each line a trial writes with them, the control plane each value it stores.

Standard library only, like the rest of this package the agent imports. The trial helper
(``agent_runtime/trial_helper/corral_trial.py``) runs inside trial images where Corral is not
installed, so it keeps its own copy of these rules; ``tests/agent/test_metric_rules.py``
checks that copy against this module, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TypeGuard


class MetricKind(StrEnum):
    TRAINING = "training"
    VALIDATION = "validation"


KINDS = tuple(k.value for k in MetricKind)
MAX_NAME_LENGTH = 64


def metric_kind(value: object) -> MetricKind | None:
    """The kind ``value`` names; None for anything else (such points are dropped)."""
    return MetricKind(value) if isinstance(value, str) and value in KINDS else None


def valid_name(name: object) -> bool:
    """A value's name: 1 to ``MAX_NAME_LENGTH`` printable characters."""
    return isinstance(name, str) and 0 < len(name) <= MAX_NAME_LENGTH and name.isprintable()


def is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number: an int or a float, not a bool (``True`` is no measurement)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite_value(value: object) -> float | None:
    """``value`` as a float when it is a finite number; None when it is not a number, is NaN
    or infinite, or is an integer beyond any float (such values are left out of a point)."""
    if not is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def whole_batches(value: object) -> int | None:
    """The batch count of a point: a whole number >= 0 (``3.0`` is 3); None otherwise."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value
