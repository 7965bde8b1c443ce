"""Small simulations with hand-checkable numbers: one pool, one $1/h offering, no faults."""

from __future__ import annotations

from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.services.shared.service_context import DomainPolicy
from corral.sim.engine import Engine, Replay
from corral.sim.metrics import SimMetrics, measure
from corral.sim.model import SimulationConfig
from corral.sim.policies import DeterminedScaling, SimPolicy
from corral.sim.trace import Job, Trace

ONE = Offering("g.1", "zone-a", CapacityType.ON_DEMAND, 1, 1.0)

QUIET = SimulationConfig.model_validate(
    {
        "boot": {"mean": 60, "jitter": 0, "pending": 0},
        "spot": {"interruptions_per_hour": 0},
        "capacity": {
            "spot": {"unavailable_fraction": 0, "mean_outage": 60},
            "on_demand": {"unavailable_fraction": 0, "mean_outage": 60},
        },
    }
)


def policy(name: str = "corral", *offerings: Offering, max_idle_s: float = 300.0) -> SimPolicy:
    offered = offerings or (ONE,)
    pool = StaticPool("gpu", offered, max_instances=10, max_idle_s=max_idle_s)
    if name == "corral":
        return SimPolicy("corral", DomainPolicy(), True, {"gpu": pool}, "gpu", offered)
    import random

    only = StaticPool(
        "gpu", offered[:1], max_instances=10, max_idle_s=max_idle_s, on_demand_fallback=False
    )
    scaling = DeterminedScaling(random.Random(0))
    return SimPolicy("determined", scaling, False, {"gpu": only}, "gpu", offered)


def run(
    jobs: list[Job], sim: SimulationConfig = QUIET, name: str = "corral", seed: int = 0
) -> tuple[SimMetrics, Replay]:
    chosen = policy(name)
    replay = Engine(sim, Trace(tuple(jobs)), chosen, seed).run()
    return measure(replay, chosen.offerings), replay
