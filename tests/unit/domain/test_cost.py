"""Cost accounting and the budget gate, one rule per test."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.domain.cost import (
    BudgetState,
    RunSegment,
    budget_allows,
    budget_state,
    hourly_burn_usd,
    instance_cost_usd,
    month_start_utc,
    month_to_date_usd,
    trial_cost_share,
)
from corral.domain.instance import InstanceState

from .factories import make_instance, make_offering, make_pool

IS = InstanceState
PRICE = 36.0  # USD/hour: one cent a second
EIGHT = make_offering("p4d.24xlarge", slots=8, hourly_price=PRICE)
MAY_10 = datetime(2024, 5, 10, 12, 0, tzinfo=UTC).timestamp()
MAY_1 = datetime(2024, 5, 1, tzinfo=UTC).timestamp()


def test_billing_is_per_second_from_launch_to_termination() -> None:
    inst = make_instance(
        IS.TERMINATED, offering=EIGHT, launched_at=MAY_10, terminated_at=MAY_10 + 1000
    )
    assert instance_cost_usd(inst, MAY_10 + 99_999) == pytest.approx(10.0)


def test_billing_has_a_sixty_second_minimum() -> None:
    inst = make_instance(
        IS.TERMINATED, offering=EIGHT, launched_at=MAY_10, terminated_at=MAY_10 + 5
    )
    assert instance_cost_usd(inst, MAY_10 + 5) == pytest.approx(0.60)


def test_a_running_instance_is_billed_up_to_now() -> None:
    inst = make_instance(IS.BUSY, offering=EIGHT, launched_at=MAY_10)
    assert instance_cost_usd(inst, MAY_10 + 3600) == pytest.approx(PRICE)


def test_a_record_that_never_got_an_instance_costs_nothing() -> None:
    for state in (IS.QUEUED, IS.REQUESTED, IS.CANCELLED, IS.ALLOCATION_FAILED):
        assert instance_cost_usd(make_instance(state, offering=EIGHT), MAY_10) == 0.0


def test_a_record_without_launch_time_is_billed_from_its_request() -> None:
    inst = make_instance(
        IS.IDLE, offering=EIGHT, launched_at=None, requested_at=MAY_10, entered_at=MAY_10 + 300
    )
    assert instance_cost_usd(inst, MAY_10 + 100) == pytest.approx(1.0)
    no_request = make_instance(
        IS.IDLE, offering=EIGHT, launched_at=None, requested_at=None, entered_at=MAY_10 + 300
    )
    allocated_at = no_request.entered_at(IS.ALLOCATED)
    assert allocated_at is not None
    assert instance_cost_usd(no_request, allocated_at + 100) == pytest.approx(1.0)


def test_a_trial_owes_its_share_of_gpus_times_time() -> None:
    cost, gpu_seconds = trial_cost_share(RunSegment(EIGHT, gpus=2, start=0.0, end=3600.0))
    assert cost == pytest.approx(PRICE * 2 / 8)
    assert gpu_seconds == 7200.0


def test_zero_gpu_work_and_cpu_offerings_owe_nothing_per_slot() -> None:
    assert trial_cost_share(RunSegment(EIGHT, 0, 0.0, 3600.0)) == (0.0, 0.0)
    cpu = make_offering("m5.large", slots=0, hourly_price=0.1)
    assert trial_cost_share(RunSegment(cpu, 1, 0.0, 10.0))[0] == 0.0


def test_month_to_date_counts_only_this_utc_months_seconds() -> None:
    assert month_start_utc(MAY_10) == MAY_1
    spanning = make_instance(IS.BUSY, offering=EIGHT, launched_at=MAY_1 - 3600)
    before = make_instance(
        IS.TERMINATED, offering=EIGHT, launched_at=MAY_1 - 7200, terminated_at=MAY_1 - 3600
    )
    now = MAY_1 + 1800
    assert month_to_date_usd([spanning, before], now) == pytest.approx(PRICE / 2)


def test_hourly_burn_counts_instances_holding_a_cloud_instance() -> None:
    fleet = [
        make_instance(IS.BUSY, offering=EIGHT),
        make_instance(IS.ALLOCATED, offering=EIGHT),
        make_instance(IS.QUEUED, offering=EIGHT),
        make_instance(IS.TERMINATED, offering=EIGHT),
    ]
    assert hourly_burn_usd(fleet) == pytest.approx(2 * PRICE)


def test_budget_allows_a_launch_while_spend_plus_an_hour_of_burn_fits() -> None:
    pool = make_pool(monthly_budget_usd=100.0)
    assert budget_allows(pool, 90.0, 5.0, 5.0)  # 90 + (5 + 5) * 1 h = 100
    assert not budget_allows(pool, 90.0, 5.0, 5.01)
    assert budget_allows(make_pool(), 1e9, 1e9, 1e9)  # no budget, no limit


def test_budget_state_for_the_pool_listing() -> None:
    pool = make_pool(monthly_budget_usd=100.0)
    assert budget_state(pool, 40.0, 10.0) == BudgetState(40.0, 100.0, 60.0, exhausted=False)
    assert budget_state(pool, 95.0, 10.0).exhausted
    assert budget_state(pool, 120.0, 0.0).remaining_usd == 0.0
    assert budget_state(make_pool(), 5.0, 1.0) == BudgetState(5.0, None, None, exhausted=False)
