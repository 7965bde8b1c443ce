"""Disks in the cost accounting: an instance's boot disk bills from its first launch until it
is terminated, running or stopped in the warm pool, and a warm start does not restart it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from corral.domain.cost import (
    compute_cost_usd,
    disk_interval,
    hourly_burn_usd,
    instance_cost_usd,
    month_to_date_usd,
)
from corral.domain.instance import Instance, InstanceState

from .factories import make_instance, make_offering

IS = InstanceState
PRICE = 36.0  # USD/hour: one cent a second
DISK = 3.6  # USD/hour: a tenth of a cent a second
FOUR = make_offering("g5.12xlarge", slots=4, hourly_price=PRICE)
MAY_10 = datetime(2024, 5, 10, 12, 0, tzinfo=UTC).timestamp()
JUNE_1 = datetime(2024, 6, 1, tzinfo=UTC).timestamp()


def running(launched: float = MAY_10) -> Instance:
    """Launched at ``launched`` (the factory's ALLOCATED step), IDLE 30 s later."""
    return make_instance(IS.IDLE, offering=FOUR, entered_at=launched + 30, step_s=30.0)


def test_the_first_launch_starts_the_disks_and_a_record_without_an_instance_has_none() -> None:
    record = running()
    assert record.disk_since == record.launched_at == MAY_10
    queued = make_instance(IS.QUEUED, offering=FOUR)
    assert queued.disk_since is None and disk_interval(queued, MAY_10) is None
    # An attempt that lost its cloud instance (a closed spot request) starts afresh.
    assert replace(record, cloud_id=None).disk_since is None


def test_a_running_instance_costs_its_compute_and_its_disks() -> None:
    record = running()
    assert instance_cost_usd(record, MAY_10 + 100, DISK) == pytest.approx(1.0 + 0.1)
    assert compute_cost_usd(record, MAY_10 + 100) == pytest.approx(1.0)
    assert instance_cost_usd(record, MAY_10 + 100) == pytest.approx(1.0)  # no rate given
    assert hourly_burn_usd([record], DISK) == pytest.approx(PRICE + DISK)


def test_a_stopped_instance_costs_its_disks_only_and_a_warm_start_keeps_their_start() -> None:
    record = running()
    stopped = replace(
        record.transition(IS.DRAINING, MAY_10 + 1000, "idle")
        .transition(IS.STOPPING, MAY_10 + 1000, "warm pool")
        .transition(IS.STOPPED, MAY_10 + 1010, "stopped"),
        closed_usd=compute_cost_usd(record, MAY_10 + 1000),
    )
    assert stopped.closed_usd == pytest.approx(10.0)
    # 5000 s later: the run's compute, and the disks all along.
    assert instance_cost_usd(stopped, MAY_10 + 5000, DISK) == pytest.approx(10.0 + 5.0)
    assert month_to_date_usd([stopped], MAY_10 + 5000, DISK) == pytest.approx(5.0)
    assert hourly_burn_usd([stopped], DISK) == pytest.approx(DISK)
    # Started again: a new run bills compute from its launch; the disks never stopped.
    again = stopped.warm_start(MAY_10 + 6000, (("t", 4),), "warm start")
    assert again.launched_at is None and again.disk_since == MAY_10
    again = replace(
        again.transition(IS.REQUESTED, MAY_10 + 6000, "starting").transition(
            IS.ALLOCATED, MAY_10 + 6000, "started"
        ),
        launched_at=MAY_10 + 6000,
    )
    assert again.disk_since == MAY_10
    assert instance_cost_usd(again, MAY_10 + 6100, DISK) == pytest.approx(10.0 + 1.0 + 6.1)


def test_termination_ends_the_disks() -> None:
    record = running()
    gone = (
        record.transition(IS.DRAINING, MAY_10 + 500, "idle")
        .transition(IS.TERMINATING, MAY_10 + 500, "reaped")
        .transition(IS.TERMINATED, MAY_10 + 600, "gone")
    )
    assert disk_interval(gone, MAY_10 + 99_999) == (MAY_10, MAY_10 + 600)
    assert instance_cost_usd(gone, MAY_10 + 99_999, DISK) == pytest.approx(6.0 + 0.6)
    assert hourly_burn_usd([gone], DISK) == 0.0


def test_month_to_date_counts_this_months_disk_seconds_only() -> None:
    stopped = make_instance(IS.STOPPED, offering=FOUR, entered_at=JUNE_1 - 940, step_s=30.0)
    assert stopped.disk_since is not None and stopped.disk_since < JUNE_1
    # Stopped since May: in June only its disks, and only since June 1.
    assert month_to_date_usd([stopped], JUNE_1 + 1000, DISK) == pytest.approx(1.0)


def _stored_before_disks(record: Instance) -> Instance:
    """``record`` as decoded from a store written before ``disk_since`` existed."""
    fields = {f: getattr(record, f) for f in record.__slots__ if f != "disk_since"}  # type: ignore[attr-defined]
    return Instance(**fields)


def test_records_stored_before_disks_were_counted_start_them_at_their_first_launch() -> None:
    assert _stored_before_disks(running()).disk_since == MAY_10
    # One on its second run, or between runs (a warm start has no launch time yet): the
    # disks still date from the first launch, as its history tells.
    stopped = make_instance(IS.STOPPED, offering=FOUR, entered_at=MAY_10 + 1000, step_s=30.0)
    first = stopped.disk_since
    assert first is not None
    between = stopped.warm_start(MAY_10 + 6000, (("t", 4),), "warm start")
    assert _stored_before_disks(between).disk_since == first
    second = replace(
        between.transition(IS.REQUESTED, MAY_10 + 6000, "starting").transition(
            IS.ALLOCATED, MAY_10 + 6005, "started"
        ),
        launched_at=MAY_10 + 6005,
    )
    assert _stored_before_disks(second).disk_since == first
