"""In a replay with the default settings, a trial that fell back to on-demand during a spot
outage moves back to spot once spot capacity returns, instead of paying about three times the
spot price until it ends."""

from __future__ import annotations

from corral.domain.instance import InstanceState
from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.services.shared.service_context import DomainPolicy
from corral.sim.engine import Engine
from corral.sim.metrics import SimMetrics, measure
from corral.sim.model import Outage
from corral.sim.policies import SimPolicy
from corral.sim.trace import Job, Trace

from .helpers import QUIET

SPOT = Offering("g.4", "zone-a", CapacityType.SPOT, 4, 4.0)
ON_DEMAND = Offering("g.4", "zone-a", CapacityType.ON_DEMAND, 4, 12.0)
OFFERINGS = (SPOT, ON_DEMAND)
LONG_S = 36_000.0
# Spot is out for the first 30 minutes: the first job waits 10 minutes, then falls back.
JOBS = (Job(0.0, 4, LONG_S, "long"), Job(3600.0, 4, 600.0, "later"))


class OneOutage(Engine):
    def _outages(self, offerings: list[Offering], horizon: float) -> list[Outage]:
        return [Outage(SPOT.key, 0.0, 1800.0)]


def replay(move_fallback_to_spot: bool) -> SimMetrics:
    pool = StaticPool(
        "gpu",
        OFFERINGS,
        max_instances=4,
        max_idle_s=300.0,
        fallback_after_s=600.0,
        move_fallback_to_spot=move_fallback_to_spot,
    )
    chosen = SimPolicy("corral", DomainPolicy(), True, {"gpu": pool}, "gpu", OFFERINGS)
    sim = QUIET.model_copy(update={"restart_overhead": 120.0})
    return measure(OneOutage(sim, Trace(JOBS), chosen, 0).run(), OFFERINGS)


def test_the_fallback_trial_goes_back_to_spot_and_costs_a_fraction() -> None:
    kept, moved = replay(False), replay(True)
    assert kept.completed == moved.completed == len(JOBS)
    # Kept: the long job runs its 10 hours on on-demand. Moved: once a spot launch proves
    # spot is back (the later job's, at 1 h) and it has a checkpoint (30 min) and has run
    # 10 minutes, it moves to spot; about 8 of its 10 hours run there.
    assert kept.on_demand_share > 0.9
    assert moved.on_demand_share < 0.25
    assert moved.cost_usd < kept.cost_usd * 0.5
    assert moved.lost_gpu_hours == 0.0  # it stopped with a checkpoint
    assert moved.restart_gpu_hours > 0.0


def test_the_move_follows_the_first_spot_agent_up_not_a_later_reaper_deadline() -> None:
    # The later job keeps its spot agent busy, so the fallback trial is requeued for spot
    # (spot is back) at the reaper pass right after that agent came up (a real reaper looks
    # every minute), not at some later deadline.
    jobs = (Job(0.0, 4, LONG_S, "long"), Job(3600.0, 4, LONG_S, "later"))
    pool = StaticPool("gpu", OFFERINGS, max_instances=4, max_idle_s=300.0, fallback_after_s=600.0)
    chosen = SimPolicy("corral", DomainPolicy(), True, {"gpu": pool}, "gpu", OFFERINGS)
    sim = QUIET.model_copy(update={"restart_overhead": 120.0})
    engine = OneOutage(sim, Trace(jobs), chosen, 0)
    replay = engine.run()
    (fallback,) = [i for i in engine.store.instances() if not i.offering.is_spot]
    drained = fallback.entered_at(InstanceState.DRAINING)
    # Spot is back at 1800 s; the later job's spot agent is up at about 3660 s (a 60 s boot).
    assert drained is not None and drained - replay.start < 3660.0 + 120.0
