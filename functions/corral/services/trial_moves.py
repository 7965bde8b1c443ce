"""Moving a trial off its GPUs, the one way every service does it: settle its cost, change
its state, free its GPUs on every agent it used (BUSY -> IDLE when an agent empties), all
returned together so the caller commits them in one conditional write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from corral.domain.instance import Instance, InstanceState
from corral.domain.trial import Trial, TrialState
from corral.services.accounting import settle_trial_cost


def free_gpus(
    trial: Trial, instances: Mapping[str, Instance], now: float, reason: str
) -> list[Instance]:
    """The trial's agents with its GPUs given back."""
    changed: list[Instance] = []
    for instance_id in trial.placement.instance_ids if trial.placement else ():
        inst = instances.get(instance_id)
        if inst is None or trial.id not in inst.trial_ids:
            continue
        inst = inst.without_allocation(trial.id)
        if inst.state is InstanceState.BUSY and not inst.allocations:
            inst = inst.transition(InstanceState.IDLE, now, reason)
        changed.append(inst)
    return changed


def move_off_gpus(
    trial: Trial,
    target: TrialState,
    instances: Mapping[str, Instance],
    now: float,
    reason: str,
) -> tuple[Trial, list[Instance]]:
    """``trial`` -> ``target`` (a state without GPUs), charging it and freeing its GPUs."""
    settled = settle_trial_cost(trial, dict(instances), now)
    freed = free_gpus(trial, instances, now, reason)
    return settled.transition(target, now, reason), freed


def requeue(
    trial: Trial, instances: Mapping[str, Instance], now: float, reason: str
) -> tuple[Trial, list[Instance]]:
    """Infrastructure took the trial's GPUs away: PREEMPTED, then PENDING at once, to resume
    from its last checkpoint. Does not use up max_restarts."""
    if trial.state is TrialState.PENDING:
        return trial, []
    preempted, freed = move_off_gpus(trial, TrialState.PREEMPTED, instances, now, reason)
    requeued = preempted.transition(TrialState.PENDING, now, "requeued to resume from checkpoint")
    return replace(requeued, preemptions=requeued.preemptions + 1), freed
