"""Cost accounting and the warm pool: a parked record bills no compute (its run's spend was
closed when it was stopped), a warm start bills from its new launch."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from corral.domain.cost import (
    billed_interval,
    could_start_this_month,
    hourly_burn_usd,
    instance_cost_usd,
    month_to_date_usd,
)
from corral.domain.instance import Instance, InstanceState
from corral.domain.policy import StaticPool

from .factories import make_instance, make_offering

IS = InstanceState
PRICE = 36.0  # USD/hour: one cent a second
EIGHT = make_offering("p4d.24xlarge", slots=8, hourly_price=PRICE)
MAY_10 = datetime(2024, 5, 10, 12, 0, tzinfo=UTC).timestamp()


def parked(state: InstanceState = IS.STOPPED) -> Instance:
    """Launched at MAY_10 (the factory's 30 s steps), stopped 1000 s later."""
    return make_instance(state, offering=EIGHT, entered_at=MAY_10 + 1000, step_s=30.0)


def started_again(at: float) -> Instance:
    """The parked record started again at ``at`` and registered 40 s later."""
    record = parked().warm_start(at, (("t1", 8),), "warm start")
    record = replace(record.transition(IS.REQUESTED, at, "starting"), requested_at=at)
    record = replace(record.transition(IS.ALLOCATED, at + 5, "started"), launched_at=at + 5)
    return replace(record.transition(IS.IDLE, at + 40, "registered"), registered_at=at + 40)


def test_a_parked_record_bills_nothing_more() -> None:
    for state in (IS.STOPPING, IS.STOPPED):
        record = replace(parked(state), closed_usd=10.0)
        assert record.stopped_at is not None
        assert billed_interval(record, MAY_10 + 5000) is None
        # What it cost is what its runs cost up to the stop, however long it stays stopped.
        assert instance_cost_usd(record, MAY_10 + 5000) == pytest.approx(10.0)
        assert instance_cost_usd(record, MAY_10 + 99_000) == pytest.approx(10.0)
        # That spend is in the pool's closed total already: month-to-date adds nothing.
        assert month_to_date_usd([record], MAY_10 + 5000) == 0.0


def test_a_terminated_record_whose_last_run_ended_in_the_warm_pool_bills_nothing() -> None:
    record = parked()
    gone = record.transition(IS.TERMINATING, MAY_10 + 9000, "expired")
    gone = gone.transition(IS.TERMINATED, MAY_10 + 9001, "gone")
    assert gone.terminated_at == MAY_10 + 9001
    assert billed_interval(gone, MAY_10 + 99_999) is None
    direct = record.transition(IS.TERMINATED, MAY_10 + 9001, "vanished while stopped")
    assert instance_cost_usd(direct, MAY_10 + 99_999) == 0.0


def test_a_queued_warm_start_still_bills_nothing() -> None:
    queued = parked().warm_start(MAY_10 + 5000, (("t1", 8),), "warm start")
    assert queued.cloud_id is not None and queued.launched_at is None
    assert billed_interval(queued, MAY_10 + 5001) is None


def test_a_warm_started_record_bills_from_its_new_launch() -> None:
    start = MAY_10 + 5000
    record = started_again(start)
    assert billed_interval(record, start + 1005) == (start + 5, start + 1005)
    assert instance_cost_usd(record, start + 1005) == pytest.approx(10.0)
    assert month_to_date_usd([record], start + 1005) == pytest.approx(10.0)


def test_a_warm_started_record_costs_its_earlier_runs_plus_the_current_one() -> None:
    start = MAY_10 + 5000
    record = replace(started_again(start), closed_usd=7.0)
    assert instance_cost_usd(record, start + 1005) == pytest.approx(17.0)
    # Month-to-date counts the current run only: the earlier ones were closed at the stop.
    assert month_to_date_usd([record], start + 1005) == pytest.approx(10.0)


def test_a_warm_started_record_terminated_bills_its_last_run_only() -> None:
    start = MAY_10 + 5000
    record = started_again(start)
    record = record.transition(IS.DRAINING, start + 500, "idle")
    record = record.transition(IS.TERMINATING, start + 505, "empty")
    gone = record.transition(IS.TERMINATED, start + 505, "gone")
    assert billed_interval(gone, start + 99_999) == (start + 5, start + 505)


def test_a_warm_started_record_stopped_again_bills_nothing_more() -> None:
    start = MAY_10 + 5000
    record = started_again(start)
    record = record.transition(IS.DRAINING, start + 500, "idle")
    again = record.transition(IS.STOPPING, start + 505, "parked again")
    assert again.stopped_at == start + 505
    assert billed_interval(again, start + 99_999) is None


def test_hourly_burn_leaves_parked_records_out() -> None:
    running = make_instance(IS.IDLE, offering=EIGHT)
    records = [running, parked(IS.STOPPING), parked(IS.STOPPED)]
    assert hourly_burn_usd(records) == pytest.approx(PRICE)
    assert hourly_burn_usd([parked(IS.STOPPED)]) == 0.0


def test_a_stop_that_never_took_bills_what_ran_after_it() -> None:
    # The spend was closed at the stop; the instance ran on until the reconciler gave the
    # stop up and terminated it: that stretch is a run of its own, not lost from the books.
    stopping = parked(IS.STOPPING)
    assert stopping.stopped_at is not None
    given_up = stopping.transition(IS.TERMINATING, stopping.stopped_at + 700, "never stopped")
    gone = given_up.transition(IS.TERMINATED, stopping.stopped_at + 710, "gone")
    assert billed_interval(gone, MAY_10 + 99_999) == (
        stopping.stopped_at,
        stopping.stopped_at + 710,
    )


def test_an_instance_could_start_while_an_hour_of_it_and_its_disk_fits_the_budget() -> None:
    offering = make_offering(hourly_price=1.0)
    pool = StaticPool("p", (offering,), monthly_budget_usd=10.0, disk_hourly_usd=0.5)
    assert could_start_this_month(pool, offering, 8.5)  # 8.5 + 1.0 + 0.5 fits
    assert not could_start_this_month(pool, offering, 8.6)
    assert could_start_this_month(replace(pool, monthly_budget_usd=None), offering, 1e9)
