"""The policies a simulation compares, plugged into the real services through
``Context.policy`` (the planner and the reaper) and the pools they see.

- ``corral``: Corral's own domain planner and reaper, on the pools exactly as configured.
- ``determined``: a model of Determined's dynamic-agent provisioner
  (docs/reference-systems.md):
  * one instance type per pool (Determined pools have one): ``determined_instance_type``
    from the simulation block, else the pool's type with the most GPUs, in the pool's
    first location (Determined takes one subnet / zone);
  * spot without on-demand fallback when the pool is spot; a refused spot launch just
    waits for capacity (modelled by retrying the same offering, never another);
  * demand = ceil(pending slots / slots per instance), minus instances launched but not
    connected yet, clamped to [min, max]; no credit for free GPUs (what the scheduler could
    not place is pending), no bin-packing of the launch, no cancelling of unneeded launches;
    a trial larger than one instance and not a multiple of it never triggers a launch;
  * agents with no containers for ``max_idle_agent_period`` are terminated in random order,
    never below ``min_instances``; nothing is reserved for pending demand;
  * no interruption handling: the notice is ignored, running trials lose the work since
    their last checkpoint, and the loss is noticed when the instance is gone.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corral.domain import reaper
from corral.domain.config import ClusterConfig
from corral.domain.instance import Instance, InstanceState
from corral.domain.offerings import Offering
from corral.domain.planner import PlannedLaunch, PoolPlan
from corral.domain.policy import PoolPolicy, StaticPool
from corral.domain.reaper import ReapDecision, ReapPlan
from corral.domain.records import Heartbeat, PoolState
from corral.domain.trial import Trial
from corral.services.shared.service_context import DomainPolicy, ScalingPolicy
from corral.sim.model import SimulationConfig

# The reaper's timer period in the simulation (EventBridge's shortest rate).
REAP_PERIOD_S = 60.0


@dataclass
class SimPolicy:
    name: str
    scaling: ScalingPolicy
    # Interruption notices reach the control plane (EventBridge rule, agent watcher).
    handles_interruptions: bool
    pools: dict[str, PoolPolicy]
    default_pool: str
    # Every offering the config allows (the oracle's prices, the capacity outages): the
    # same for every policy, whatever subset it launches.
    offerings: tuple[Offering, ...]
    # What a stopped instance costs an hour (its disks), by pool.
    stopped_usd_per_hour: dict[str, float] = field(default_factory=dict)

    def reap_deadline(self, pool: PoolPolicy, instance: Instance) -> float | None:
        """When an IDLE agent first becomes a candidate for the reaper (None: never)."""
        if isinstance(self.scaling, DeterminedScaling):
            return self.scaling.deadline(pool, instance)
        return reaper.drain_deadline(pool, instance)


def corral_policy(cluster: ClusterConfig, sim: SimulationConfig) -> SimPolicy:
    pools: dict[str, PoolPolicy] = {p.name: snapshot(p) for p in cluster.resource_pools}
    return SimPolicy("corral", DomainPolicy(), True, pools, *_shared(cluster))


def snapshot(pool: PoolPolicy) -> StaticPool:
    """The pool with its settings and offerings read once. A config pool derives its
    offerings on every call, which the planner makes on every pass: in a replay of months
    that was a tenth of the run time."""
    return StaticPool(
        name=pool.name,
        offering_list=tuple(pool.offerings()),
        min_instances=pool.min_instances,
        max_instances=pool.max_instances,
        max_idle_s=pool.max_idle_s,
        starting_deadline_s=pool.starting_deadline_s,
        launch_error_retries=pool.launch_error_retries,
        capacity_memory_s=pool.capacity_memory_s,
        monthly_budget_usd=pool.monthly_budget_usd,
        on_demand_fallback=pool.on_demand_fallback,
        reap_fallback_early=pool.reap_fallback_early,
        fallback_after_s=pool.on_demand_fallback_after_s,
        consolidate=pool.consolidate,
        move_fallback_to_spot=pool.move_fallback_to_spot,
        warm_pool_size=pool.warm_pool_size,
        max_stopped_s=pool.max_stopped_s,
        disk_hourly_usd=pool.disk_hourly_usd,
    )


def _shared(cluster: ClusterConfig) -> tuple[str, tuple[Offering, ...], dict[str, float]]:
    """What every policy shares: the default pool, every offering, the disks' prices (the
    same cloud for all; only a warm pool ever pays for a stopped instance's disks)."""
    offerings = tuple(o for p in cluster.resource_pools for o in p.offerings())
    disks = {p.name: p.disk_hourly_usd for p in cluster.resource_pools}
    return cluster.default_pool_name, offerings, disks


def determined_policy(cluster: ClusterConfig, sim: SimulationConfig, seed: int) -> SimPolicy:
    pools: dict[str, PoolPolicy] = {}
    for pool in cluster.resource_pools:
        offering = determined_offering(pool, sim.determined_instance_type)
        pools[pool.name] = StaticPool(
            name=pool.name,
            offering_list=(offering,) if offering is not None else (),
            min_instances=pool.min_instances,
            max_instances=pool.max_instances,
            max_idle_s=pool.max_idle_s,
            starting_deadline_s=pool.starting_deadline_s,
            launch_error_retries=pool.launch_error_retries,
            capacity_memory_s=pool.capacity_memory_s,
            monthly_budget_usd=None,
            on_demand_fallback=False,
            reap_fallback_early=False,
        )
    scaling = DeterminedScaling(random.Random(f"{seed}:determined-reaper"))
    return SimPolicy("determined", scaling, False, pools, *_shared(cluster))


def determined_offering(pool: PoolPolicy, instance_type: str | None) -> Offering | None:
    """The one offering a Determined pool launches: its type, first location, spot if the
    pool is spot (Corral lists spot offerings first), else on-demand."""
    offerings = pool.offerings()
    if not offerings:
        return None
    if instance_type is None:
        biggest = max(offerings, key=lambda o: o.slots)  # first of the largest, config order
        instance_type = biggest.instance_type
    mine = [o for o in offerings if o.instance_type == instance_type]
    if not mine:
        return None
    first_location = mine[0].location
    return next(o for o in mine if o.location == first_location)


@dataclass
class DeterminedScaling:
    """Determined's scale decider and idle terminator, as a ScalingPolicy."""

    rng: random.Random
    launched: dict[str, int] = field(default_factory=dict)

    def plan_pool(
        self,
        pool: PoolPolicy,
        unplaced: Sequence[Trial],
        instances: Sequence[Instance],
        state: PoolState,
        now: float,
        *,
        leftover_free: Mapping[str, tuple[int, ...]] | None = None,
        month_to_date_usd: float = 0.0,
    ) -> PoolPlan:
        offerings = pool.offerings()
        if not offerings:
            return PoolPlan(pool.name)
        offering = offerings[0]
        per_instance = max(offering.slots, 1)
        # A trial bigger than one instance and not a multiple of it is never counted.
        slots = sum(
            t.slots for t in unplaced if t.slots <= per_instance or t.slots % per_instance == 0
        )
        live = [i for i in instances if i.is_live and i.pool == pool.name]
        starting = sum(1 for i in live if i.is_starting)
        wanted = math.ceil(slots / per_instance) - starting
        wanted = max(wanted, pool.min_instances - len(live))
        count = max(0, min(wanted, pool.max_instances - len(live)))
        launches = tuple(
            PlannedLaunch(offering, (), f"{slots} pending slot(s)") for _ in range(count)
        )
        return PoolPlan(pool.name, launches)

    def deadline(self, pool: PoolPolicy, instance: Instance) -> float | None:
        since = reaper.idle_since(instance)
        if since is None:
            return None
        # Corral's services drain first and terminate one reaper pass later; draining one
        # pass early makes a Determined agent die at max_idle_agent_period, as it does there.
        return since + max(pool.max_idle_s - REAP_PERIOD_S, 0.0)

    def plan_reaping(
        self,
        pool: PoolPolicy,
        instances: Sequence[Instance],
        now: float,
        *,
        reserved: frozenset[str] = frozenset(),
        heartbeats: Mapping[str, Heartbeat] | None = None,
        room_needed: int = 0,
        fresh_after: float | None = None,
        month_to_date_usd: float | None = None,  # Determined keeps no warm pool
    ) -> ReapPlan:
        beats = heartbeats or {}
        mine = [i for i in instances if i.pool == pool.name]
        terminate = [
            ReapDecision(i, InstanceState.TERMINATING, "drained and empty")
            for i in mine
            if i.state is InstanceState.DRAINING and not reaper.has_work(i, beats.get(i.id))
        ]
        staying = sum(1 for i in mine if i.is_schedulable)
        idle = [
            i
            for i in mine
            if i.state is InstanceState.IDLE
            and not reaper.has_work(i, beats.get(i.id))
            and (self.deadline(pool, i) or math.inf) < now
        ]
        idle.sort(key=lambda i: i.id)
        self.rng.shuffle(idle)  # Determined picks its idle victims in random order
        drain = []
        for inst in idle:
            if staying <= pool.min_instances:
                break
            drain.append(ReapDecision(inst, InstanceState.DRAINING, "idle (determined)"))
            staying -= 1
        return ReapPlan(tuple(drain), tuple(terminate))
