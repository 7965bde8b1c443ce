"""The short chaos soak inside ``make test``: a small seeded workload with every fault kind
on, through the real handlers against moto (a few tens of seconds). The full soak is
``make chaos``; see docs/reliability.md."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.chaos.config import SHORT
from tests.chaos.report import render
from tests.chaos.soak import run_soak


@pytest.fixture
def quiet() -> Iterator[None]:
    """Thousands of handler and agent log lines: none is worth capturing."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_short_chaos_soak_holds_every_invariant(quiet: None) -> None:
    result = run_soak(SHORT)
    report = render(result, verbose=True)
    assert result.figures["trials"] == SHORT.trials, report
    assert sum(result.faults.values()) > 0, report
    assert not any(result.violations.values()), report
