"""The one retry loop for read-decide-commit steps that lose a race."""

from __future__ import annotations

import pytest

from corral.domain.errors import ConflictError
from corral.ports.store import retry_on_conflict


def test_a_step_that_wins_at_last_returns_its_result() -> None:
    calls: list[int] = []

    def step() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConflictError("lost")
        return "won"

    assert retry_on_conflict(step) == "won"
    assert len(calls) == 3


def test_the_last_conflict_propagates() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        raise ConflictError("always lost")

    with pytest.raises(ConflictError):
        retry_on_conflict(step, attempts=2)
    assert len(calls) == 2


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        raise ValueError("bad")

    with pytest.raises(ValueError):
        retry_on_conflict(step)
    assert len(calls) == 1
