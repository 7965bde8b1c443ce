"""Garbage collection is deferred while a handler starts, then the start is frozen."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator

import pytest

from corral.handlers.aws import cold_start


@pytest.fixture
def gc_state() -> Iterator[None]:
    """Leave the collector as the test found it."""
    thresholds = gc.get_threshold()
    saved = list(cold_start._saved)
    cold_start._saved.clear()
    gc.set_threshold(700, 10, 10)
    yield
    cold_start._saved[:] = saved
    gc.set_threshold(*thresholds)
    gc.unfreeze()


@pytest.mark.usefixtures("gc_state")
def test_defer_then_settle_after_the_first_event() -> None:
    cold_start.defer_collection()
    cold_start.defer_collection()  # idempotent: the original thresholds are kept
    assert gc.get_threshold() == cold_start.DEFERRED_THRESHOLDS
    gc.unfreeze()
    calls: list[int] = []

    def handle(event: int) -> int:
        calls.append(event)
        return event

    handler = cold_start.settles_after(handle)

    assert handler(1) == 1
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() > 0  # what the start built is out of later collections
    gc.set_threshold(1, 1, 1)  # changed later by someone else: a second event leaves it alone
    assert handler(2) == 2
    assert gc.get_threshold() == (1, 1, 1)
    assert calls == [1, 2]


@pytest.mark.usefixtures("gc_state")
def test_a_failed_first_event_settles_too() -> None:
    cold_start.defer_collection()

    def fail(event: object) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        cold_start.settles_after(fail)(None)
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("name", ["api", "schedule", "scale_up", "idle_reap", "spot_reconcile"])
def test_every_handler_settles_after_its_first_event(name: str) -> None:
    module = importlib.import_module(f"corral.handlers.aws.{name}")
    wrapper_code = cold_start.settles_after(lambda: None).__code__

    assert module.handler.__code__ is wrapper_code
