"""The one retry loop for read-decide-commit steps that lose a race."""

from __future__ import annotations

import pytest

from corral.domain.errors import ConflictError
from corral.ports.store import retry_on_conflict


class _Step:
    """A step that plays ``outcomes`` in turn (an exception is raised, a value returned; the
    last one again once they run out), counting its calls."""

    def __init__(self, *outcomes: Exception | str) -> None:
        self.outcomes = outcomes
        self.calls = 0

    def __call__(self) -> str:
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def test_a_step_that_wins_at_last_returns_its_result() -> None:
    step = _Step(ConflictError("lost"), ConflictError("lost"), "won")
    assert retry_on_conflict(step) == "won"
    assert step.calls == 3


def test_the_last_conflict_propagates() -> None:
    step = _Step(ConflictError("always lost"))
    with pytest.raises(ConflictError):
        retry_on_conflict(step, attempts=2)
    assert step.calls == 2


def test_other_errors_are_not_retried() -> None:
    step = _Step(ValueError("bad"))
    with pytest.raises(ValueError):
        retry_on_conflict(step)
    assert step.calls == 1
