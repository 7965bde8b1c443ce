"""Spend bookkeeping shared by the services: month-to-date per pool, and trial cost shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from corral.domain.cost import RunSegment, month_start_utc, month_to_date_usd, trial_cost_share
from corral.domain.instance import Instance
from corral.domain.records import PoolState
from corral.domain.trial import HOLDS_GPUS, Trial, TrialState


def pool_month_to_date(state: PoolState, live: Iterable[Instance], now: float) -> float:
    closed = state.closed_spend_usd if state.spend_month_start == month_start_utc(now) else 0.0
    return closed + month_to_date_usd(live, now)


def close_instance_spend(state: PoolState, instance: Instance, now: float) -> PoolState:
    """Move a terminated instance's spend this month into the pool's closed total."""
    month = month_start_utc(now)
    closed = state.closed_spend_usd if state.spend_month_start == month else 0.0
    return replace(
        state,
        spend_month_start=month,
        closed_spend_usd=closed + month_to_date_usd([instance], now),
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
