"""Spend bookkeeping shared by the services: month-to-date per pool, and trial cost shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from corral.domain.cost import RunSegment, month_start_utc, month_to_date_usd, trial_cost_share
from corral.domain.instance import Instance
from corral.domain.policy import PoolPolicy
from corral.domain.records import PoolState
from corral.domain.trial import HOLDS_GPUS, Trial, TrialState


def disk_rate(pool: PoolPolicy | None) -> float:
    """What one instance's disks cost an hour in ``pool``; 0 for a pool no longer configured
    (its size is unknown: its instances' disks go uncounted while it is wound down)."""
    return pool.disk_hourly_usd if pool is not None else 0.0


def pool_month_to_date(
    state: PoolState, live: Iterable[Instance], now: float, disk_hourly_usd: float
) -> float:
    """The pool's spend this month: what was closed (terminated instances, runs that ended
    in the warm pool) and what its live instances have cost since (compute and disks)."""
    closed = state.closed_spend_usd if state.spend_month_start == month_start_utc(now) else 0.0
    return closed + month_to_date_usd(live, now, disk_hourly_usd)


def close_instance_spend(
    state: PoolState, instance: Instance, now: float, disk_hourly_usd: float
) -> PoolState:
    """Move an instance's spend this month into the pool's closed total: on termination
    its current run and its disks; on a stop into the warm pool (``disk_hourly_usd`` 0) its
    run only, since its disks bill on until it is terminated."""
    month = month_start_utc(now)
    closed = state.closed_spend_usd if state.spend_month_start == month else 0.0
    return replace(
        state,
        spend_month_start=month,
        closed_spend_usd=closed + month_to_date_usd([instance], now, disk_hourly_usd),
    )


def settle_trial_cost(trial: Trial, instances: dict[str, Instance], now: float) -> Trial:
    """Charge a trial for the GPUs it held since it was assigned; call when it leaves them."""
    if trial.state not in HOLDS_GPUS or trial.placement is None:
        return trial
    start = trial.entered_at(TrialState.ASSIGNED)
    if start is None:
        return trial
    cost = gpu_seconds = 0.0
    for instance_id, gpus in trial.placement.parts:
        inst = instances.get(instance_id)
        if inst is None:
            continue
        c, g = trial_cost_share(RunSegment(inst.offering, len(gpus), start, now))
        cost += c
        gpu_seconds += g
    return replace(
        trial, cost_usd=trial.cost_usd + cost, gpu_seconds=trial.gpu_seconds + gpu_seconds
    )
