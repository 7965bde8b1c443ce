"""One call to replay a trace under a policy: what the CLI and the benchmarks use."""

from __future__ import annotations

from corral.domain.config import ClusterConfig
from corral.sim.engine import Engine, Replay
from corral.sim.metrics import SimMetrics, measure
from corral.sim.model import SimulationConfig, simulation_config
from corral.sim.policies import SimPolicy, corral_policy, determined_policy
from corral.sim.trace import Trace

POLICIES = ("corral", "determined")


def build_policy(name: str, cluster: ClusterConfig, sim: SimulationConfig, seed: int) -> SimPolicy:
    if name == "corral":
        return corral_policy(cluster, sim)
    if name == "determined":
        return determined_policy(cluster, sim, seed)
    raise ValueError(f"unknown policy {name!r} (choose from {', '.join(POLICIES)})")


def simulate(
    cluster: ClusterConfig, trace: Trace, policy: str, seed: int | None = None
) -> tuple[SimMetrics, Replay]:
    """Replay ``trace`` on ``cluster`` under ``policy``. ``seed`` overrides the simulation
    block's; the same seed gives every policy the same cloud draws. Raises ConfigError for a
    simulation block that cannot be used."""
    sim = simulation_config(cluster.simulation, cluster)  # ConfigError names simulation.*
    if seed is not None:
        sim = sim.model_copy(update={"seed": seed})
    chosen = build_policy(policy, cluster, sim, sim.seed)
    replay = Engine(sim, trace, chosen, sim.seed).run()
    return measure(replay, chosen.offerings), replay
