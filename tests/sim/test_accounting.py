"""The oracle and the accounting, on traces small enough to compute by hand."""

from __future__ import annotations

import pytest

from corral.domain.offerings import CapacityType, Offering
from corral.sim.metrics import cheapest_gpu_hour, percentile
from corral.sim.trace import Job

from .helpers import run


def test_one_job_costs_boot_work_and_idle_until_reaped() -> None:
    # Launched at 0, billed from 0 (no unbilled pending phase), registers at 60 s, runs
    # 3600 s, idle from 3660 s. The reaper runs on the minute: idle > 300 s first at
    # 4020 s, drained and (its fresh heartbeat reporting nothing) terminated in that pass.
    metrics, _ = run([Job(0, 1, 3600, "one")])
    assert metrics.completed == metrics.jobs == 1
    assert metrics.cost_usd == pytest.approx(4020 / 3600, abs=0.01)
    assert metrics.oracle_cost_usd == pytest.approx(1.0)
    assert metrics.cost_ratio == pytest.approx(4020 / 3600, abs=1e-3)
    assert metrics.wait_p50_s == metrics.wait_p95_s == metrics.wait_max_s == 60.0
    assert metrics.gpu_hours_used == pytest.approx(1.0)
    assert metrics.gpu_hours_paid == pytest.approx(4020 / 3600, abs=0.01)
    assert metrics.idle_gpu_hours == pytest.approx(420 / 3600, abs=0.01)
    assert metrics.instances_launched == 1
    assert metrics.spot_interruptions == metrics.launch_failures == 0
    assert metrics.lost_gpu_hours == 0.0


def test_determined_terminates_at_max_idle_agent_period() -> None:
    # Drained one pass early so that termination lands at idle + 300 s: 3960 s -> 4020 s.
    metrics, _ = run([Job(0, 1, 3600, "one")], name="determined")
    assert metrics.cost_usd == pytest.approx(4020 / 3600, abs=0.01)
    assert metrics.wait_max_s == 60.0


def test_a_second_job_reuses_the_idle_agent_without_waiting() -> None:
    metrics, _ = run([Job(0, 1, 600, "a"), Job(700, 1, 600, "b")])
    assert metrics.instances_launched == 1
    assert metrics.wait_p50_s == 30.0  # waits 60 and 0
    assert metrics.wait_max_s == 60.0
    assert metrics.gpu_hours_used == pytest.approx(1200 / 3600, abs=0.01)


def test_oracle_price_is_the_cheapest_gpu_hour_of_any_offering() -> None:
    offerings = [
        Offering("a", "z", CapacityType.SPOT, 1, 0.92),
        Offering("b", "z", CapacityType.SPOT, 4, 3.67),
        Offering("c", "z", CapacityType.ON_DEMAND, 1, 3.06),
        Offering("unpriced", "z", CapacityType.ON_DEMAND, 8, 0.0),
    ]
    assert cheapest_gpu_hour(offerings) == pytest.approx(3.67 / 4)
    assert cheapest_gpu_hour([]) == 0.0


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 95) == 0.0
    assert percentile([0, 10], 50) == 5.0
    assert percentile([0.0] * 19 + [100.0], 95) == pytest.approx(5.0)
