"""Moving a trial off its GPUs, the one way every service does it: settle its cost, change
its state, free its GPUs on every agent it used (BUSY -> IDLE when an agent empties), all
returned together so the caller commits them in one conditional write."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from corral.domain.instance import Instance, InstanceState
from corral.domain.trial import Placement, Trial, TrialState
from corral.services.shared.spend import settle_trial_cost


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
    trial: Trial,
    instances: Mapping[str, Instance],
    now: float,
    reason: str,
    *,
    still_running: Collection[str] = (),
) -> tuple[Trial, list[Instance]]:
    """Infrastructure took the trial's GPUs away: it resumes from its last checkpoint, and
    this does not use up max_restarts.

    ``still_running``: agents of its placement that still run it (the one that got a spot
    notice and is checkpointing, the surviving ranks of a gang). The trial then stays
    PREEMPTED on those agents' GPUs, which they are told to stop, until they confirm
    (``finish_preemption``); the others' GPUs are freed now. With none, it is PENDING at
    once."""
    if trial.state is TrialState.PENDING:
        return trial, []
    keep = [p for p in trial.placement.parts if p[0] in still_running] if trial.placement else []
    again = trial.state is TrialState.PREEMPTED  # already waiting: only fewer agents now
    if not keep:
        if again:
            return finish_preemption(trial, instances, now, reason)
        counted = replace(trial, preemptions=trial.preemptions + 1)
        preempted, freed = move_off_gpus(counted, TrialState.PREEMPTED, instances, now, reason)
        return preempted.transition(TrialState.PENDING, now, "requeued to resume"), freed
    assert trial.placement is not None
    kept = frozenset(i for i, _ in keep)
    gone = replace(
        trial, placement=Placement(tuple(p for p in trial.placement.parts if p[0] not in kept))
    )
    # Charge the GPUs given back now; the kept ones are charged when they are given back.
    charged = settle_trial_cost(gone, dict(instances), now)
    freed = free_gpus(gone, instances, now, reason)
    if not again:
        charged = charged.transition(TrialState.PREEMPTED, now, f"{reason}; waiting for it to stop")
        charged = replace(charged, preemptions=charged.preemptions + 1)
    return replace(charged, placement=Placement(tuple(keep))), freed


def finish_preemption(
    trial: Trial, instances: Mapping[str, Instance], now: float, reason: str
) -> tuple[Trial, list[Instance]]:
    """A PREEMPTED trial's last agents stopped it (or are gone): PENDING, GPUs freed."""
    return move_off_gpus(trial, TrialState.PENDING, instances, now, f"requeued to resume: {reason}")
