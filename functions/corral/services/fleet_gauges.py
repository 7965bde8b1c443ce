"""The fleet gauges a schedule pass reports (pending trials, idle instances, pools with their
circuit breaker open or their budget reached), from what the pass itself read and wrote.

Why from the pass: reading them again after it (every pending trial, every live instance and
each pool's state) doubled the read units of every pass, and reading all pending trials is
the cost that grows with the queue (docs/benchmarks.md, section 1)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from corral.domain import backoff, cost
from corral.domain.instance import Instance, InstanceState
from corral.domain.policy import PoolPolicy
from corral.domain.records import PoolState
from corral.domain.trial import Trial, TrialState
from corral.services.shared.spend import pool_month_to_date


@dataclass(frozen=True)
class FleetGauges:
    pending_trials: int = 0
    idle_instances: int = 0
    breaker_open: tuple[str, ...] = ()  # pool names
    budget_reached: tuple[str, ...] = ()


def gauges_after_pass(
    pools: Mapping[str, PoolPolicy],
    waiting: Iterable[Trial],
    assigned: Collection[str],
    live: Iterable[Instance],
    states: Mapping[str, PoolState],
    now: float,
) -> FleetGauges:
    """``waiting``: the trials the pass read; ``assigned``: those it placed; ``live``: the
    instances as the pass left them; ``states``: the pool states it read."""
    live = list(live)
    breaker_open: list[str] = []
    budget_reached: list[str] = []
    for name, pool in sorted(pools.items()):
        state = states.get(name, PoolState(name))
        pool_live = [i for i in live if i.pool == name]
        if backoff.is_breaker_open(state, now):
            breaker_open.append(name)
        spent = pool_month_to_date(state, pool_live, now, pool.disk_hourly_usd)
        burn = cost.hourly_burn_usd(pool_live, pool.disk_hourly_usd)
        if cost.budget_state(pool, spent, burn).exhausted:
            budget_reached.append(name)
    return FleetGauges(
        pending_trials=sum(
            1 for t in waiting if t.state is TrialState.PENDING and t.id not in assigned
        ),
        idle_instances=sum(1 for i in live if i.state is InstanceState.IDLE),
        breaker_open=tuple(breaker_open),
        budget_reached=tuple(budget_reached),
    )
