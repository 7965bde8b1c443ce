"""Idle GPU-hours by cause and the on-demand share, on scenarios computed by hand."""

from __future__ import annotations

import pytest

from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.services.shared.service_context import DomainPolicy
from corral.sim.engine import Engine
from corral.sim.idle import IdleBreakdown, Paid, idle_breakdown, instance_idle, on_demand_share
from corral.sim.metrics import measure
from corral.sim.model import Outage, SimulationConfig
from corral.sim.policies import SimPolicy
from corral.sim.trace import Job, Trace
from corral.sim.workers import AgentLog

from .helpers import QUIET, run

H = 3600.0
FOUR = Offering("g.4", "zone-a", CapacityType.ON_DEMAND, 4, 4.0)
ONE_SPOT = Offering("g.1", "zone-a", CapacityType.SPOT, 1, 0.3)
ONE_OD = Offering("g.1", "zone-a", CapacityType.ON_DEMAND, 1, 1.0)


def test_each_cause_of_one_agent_by_hand() -> None:
    # An 8-GPU instance paid from 0 to 1000 s, registered at 100 s; one trial holds 1 GPU
    # from 200 to 500 s, another 4 GPUs from 300 to 600 s.
    paid = Paid("i-1", 0.0, 1000.0, 8, 1.0, on_demand=False)
    log = AgentLog(8, 100.0, False, [(200.0, 1), (300.0, 4), (500.0, -1), (600.0, -4)])
    found = instance_idle(paid, log)
    assert found.boot_gpu_h == pytest.approx(8 * 100 / H)
    assert found.gang_gpu_h == 0.0
    assert found.reaping_gpu_h == pytest.approx((8 * 100 + 8 * 400) / H)
    assert found.fragmented_gpu_h == pytest.approx((7 * 100 + 3 * 200 + 4 * 100) / H)
    used = (1 * 300 + 4 * 300) / H
    assert found.total_gpu_h + used == pytest.approx(paid.gpu_h)


def test_an_agent_launched_for_a_gang_waits_for_its_peers_until_its_first_work() -> None:
    paid = Paid("i-1", 0.0, 1000.0, 8, 1.0, on_demand=False)
    log = AgentLog(8, 100.0, True, [(250.0, 8), (700.0, -8)])
    found = instance_idle(paid, log)
    assert found.gang_gpu_h == pytest.approx(8 * 150 / H)  # 100 -> 250: the gang's wait
    assert found.reaping_gpu_h == pytest.approx(8 * 300 / H)  # after its work: reaping
    assert instance_idle(paid, None) == IdleBreakdown(boot_gpu_h=8 * 1000 / H)  # never up


def test_on_demand_share_is_of_paid_gpu_hours() -> None:
    paid = [
        Paid("a", 0.0, 3600.0, 4, 1.0, on_demand=False),  # 4 GPU-h spot
        Paid("b", 0.0, 3600.0, 1, 1.0, on_demand=True),  # 1 GPU-h on-demand
    ]
    assert on_demand_share(paid) == pytest.approx(0.2)
    assert on_demand_share([]) == 0.0


def test_one_job_alone_is_boot_then_idle_until_reaped() -> None:
    # As in test_accounting: registers at 60 s, runs 3600 s, terminated at 4020 s.
    metrics, _ = run([Job(0, 1, 3600, "one")])
    assert metrics.idle_boot_gpu_hours == pytest.approx(60 / H, abs=0.005)
    assert metrics.idle_reaping_gpu_hours == pytest.approx(360 / H, abs=0.005)
    assert metrics.idle_gang_gpu_hours == metrics.idle_fragmented_gpu_hours == 0.0
    assert metrics.on_demand_share == 1.0  # the helper's offering is on-demand


def simulate(offerings: tuple[Offering, ...], jobs: list[Job], sim: SimulationConfig = QUIET,
             outages: list[Outage] | None = None, **pool: object):  # type: ignore[no-untyped-def]  # fmt: skip
    static = StaticPool("gpu", offerings, max_instances=10, max_idle_s=300.0, **pool)  # type: ignore[arg-type]
    chosen = SimPolicy("corral", DomainPolicy(), True, {"gpu": static}, "gpu", offerings)

    class Scripted(Engine):
        def _outages(self, offerings: list[Offering], horizon: float) -> list[Outage]:
            return list(outages or [])

    replay = Scripted(sim, Trace(tuple(jobs)), chosen, 0).run()
    return measure(replay, chosen.offerings), replay


def test_spare_gpus_of_a_busy_agent_are_fragmentation() -> None:
    # One 1-GPU job on the only (4-GPU) shape: 3 GPUs spare for the whole run.
    metrics, _ = simulate((FOUR,), [Job(0, 1, 3600, "small")])
    assert metrics.idle_boot_gpu_hours == pytest.approx(4 * 60 / H, abs=0.01)
    assert metrics.idle_fragmented_gpu_hours == pytest.approx(3 * 3600 / H, abs=0.01)
    assert metrics.idle_reaping_gpu_hours == pytest.approx(4 * 360 / H, abs=0.01)
    assert metrics.idle_gang_gpu_hours == 0.0
    parts = (
        metrics.idle_boot_gpu_hours
        + metrics.idle_fragmented_gpu_hours
        + metrics.idle_reaping_gpu_hours
    )
    assert parts == pytest.approx(metrics.idle_gpu_hours, abs=0.02)


def test_the_first_member_of_a_gang_up_waits_for_the_second() -> None:
    jittery = QUIET.model_copy(
        update={"boot": QUIET.boot.model_copy(update={"mean": 600.0, "jitter": 500.0})}
    )
    _, replay = simulate((ONE_OD,), [Job(0, 2, 3600, "gang")], jittery)
    first, second = sorted(replay.startup_draws)
    assert second - first > 60  # the seed draws two clearly different boots
    # Billed from launch (no pending phase): each agent boots for its draw; the first one up
    # then waits for the second, one GPU for (second - first) seconds.
    found = idle_breakdown(replay)
    assert found.boot_gpu_h == pytest.approx((first + second) / H)
    assert found.gang_gpu_h == pytest.approx((second - first) / H)
    assert found.fragmented_gpu_h == 0.0


def test_a_spot_outage_waits_the_fallback_delay_then_buys_on_demand() -> None:
    outage = [Outage(ONE_SPOT.key, 0.0, 10 * H)]
    delayed, _ = simulate(
        (ONE_SPOT, ONE_OD), [Job(0, 1, 3600, "a")], outages=outage, fallback_after_s=600.0
    )
    assert delayed.on_demand_share == 1.0
    # 600 s for spot, then the next schedule pass or launch re-drive (<= 2 min), a boot.
    assert 600 + 60 <= delayed.wait_max_s <= 600 + 120 + 60 + 60
    at_once, _ = simulate(
        (ONE_SPOT, ONE_OD), [Job(0, 1, 3600, "a")], outages=outage, fallback_after_s=0.0
    )
    assert at_once.on_demand_share == 1.0
    assert at_once.wait_max_s == pytest.approx(60.0)
    spot, _ = simulate((ONE_SPOT, ONE_OD), [Job(0, 1, 3600, "a")], fallback_after_s=600.0)
    assert spot.on_demand_share == 0.0
