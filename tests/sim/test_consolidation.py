"""Consolidation in a replay: two agents left with one long trial each become one, and the
moved trial pays the restart time and loses no work."""

from __future__ import annotations

from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.services.shared.service_context import DomainPolicy
from corral.sim.engine import Engine
from corral.sim.metrics import SimMetrics, measure
from corral.sim.policies import SimPolicy
from corral.sim.trace import Job, Trace

from .helpers import QUIET

FOUR = Offering("g.4", "zone-a", CapacityType.SPOT, 4, 4.0)
LONG_S = 20_000.0
# Each wave fills one 4-GPU agent: one long job and three short ones. Once the short ones
# end, each agent runs one long job on one of its four GPUs.
JOBS = tuple(
    Job(at, 1, LONG_S if i == 0 else 600.0, f"{wave}-{i}")
    for wave, at in (("a", 0.0), ("b", 100.0))
    for i in range(4)
)


def replay(consolidate: bool) -> SimMetrics:
    pool = StaticPool("gpu", (FOUR,), max_instances=4, max_idle_s=300.0, consolidate=consolidate)
    chosen = SimPolicy("corral", DomainPolicy(), True, {"gpu": pool}, "gpu", (FOUR,))
    sim = QUIET.model_copy(update={"restart_overhead": 120.0})
    return measure(Engine(sim, Trace(JOBS), chosen, 0).run(), (FOUR,))


def test_two_half_empty_agents_become_one_and_no_work_is_lost() -> None:
    kept, moved = replay(consolidate=False), replay(consolidate=True)
    assert kept.completed == moved.completed == len(JOBS)
    assert kept.instances_launched == moved.instances_launched == 2
    # Without it both agents are paid until their long job ends (about 2 x 4 x 5.5 h of
    # GPU time); with it one is emptied once the trial on it has a checkpoint (30 min) and
    # terminated: about 4 x 5 h of GPU time less.
    saved = kept.gpu_hours_paid - moved.gpu_hours_paid
    assert 4 * 4.5 < saved < 4 * 5.6
    assert moved.cost_usd < kept.cost_usd * 0.6
    assert moved.lost_gpu_hours == kept.lost_gpu_hours == 0.0  # stopped with a checkpoint
    assert moved.restart_gpu_hours == round(120.0 / 3600, 2)  # one resume: 2 min of 1 GPU
    assert kept.restart_gpu_hours == 0.0
