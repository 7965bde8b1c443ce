"""The local stack's background loop: a failing step is logged and retried, and the loop ends
when the stack stops (quietly when the step failed because the stack was stopping)."""

from __future__ import annotations

import logging
import threading

import pytest

from corral.local.loops import run_until_stopped

LOG = logging.getLogger("test-loop")


class _Stop(threading.Event):
    """The stop event, recording the pauses asked of it instead of taking them."""

    def __init__(self) -> None:
        super().__init__()
        self.pauses: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.pauses.append(timeout)
        return self.is_set()


def test_a_failing_step_is_logged_and_retried_until_the_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = _Stop()
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        if len(calls) == 3:
            stop.set()

    run_until_stopped(stop, step, LOG, "the step", every_s=30.0, retry_s=60.0)
    assert len(calls) == 3
    assert stop.pauses == [60.0, 30.0, 30.0]  # the retry's pause, then one after each step
    assert [r.getMessage() for r in caplog.records] == ["the step failed; retrying"]


def test_a_failure_while_stopping_ends_the_loop_quietly(caplog: pytest.LogCaptureFixture) -> None:
    stop = _Stop()
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        stop.set()
        raise RuntimeError("moto went away")

    run_until_stopped(stop, step, LOG, "the step", retry_s=60.0)
    assert calls == [1]
    assert stop.pauses == []
    assert caplog.records == []
