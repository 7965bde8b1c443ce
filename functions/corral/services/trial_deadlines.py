"""Trials no agent is moving on (timer, with reconcile): requeue the ones never started,
cancel the ones whose stop was never confirmed. The rules are in ``domain.trial_deadlines``.
"""

from __future__ import annotations

from collections.abc import Collection

from corral.domain.errors import ConflictError
from corral.domain.instance import Instance
from corral.domain.records import Event, EventKind
from corral.domain.trial import Trial, TrialState
from corral.domain.trial_deadlines import OverdueAction, overdue_trials
from corral.services.shared.instance_removal import wake_scheduler
from corral.services.shared.service_context import Context
from corral.services.shared.trial_release import move_off_gpus, requeue


def settle_overdue_trials(ctx: Context) -> list[str]:
    """One pass; returns the ids of the trials moved. A trial that changed meanwhile (the
    agent reported at last) loses the conditional write and is looked at again next pass."""
    trials = ctx.store.trials(
        states={TrialState.ASSIGNED, TrialState.PREEMPTED, TrialState.STOPPING}
    )
    agents = sorted({i for t in trials if t.placement for i in t.placement.instance_ids})
    heartbeats = ctx.store.heartbeats(agents) if agents else {}
    moved: list[str] = []
    now = ctx.clock.now()
    for overdue in overdue_trials(trials, heartbeats, now, ctx.settings.trial_deadlines):
        if overdue.action is OverdueAction.REQUEUE:
            done = settle_trial(ctx, overdue.trial, TrialState.PENDING, overdue.reason)
        else:
            done = settle_trial(ctx, overdue.trial, TrialState.CANCELLED, overdue.reason)
        if done:
            moved.append(overdue.trial.id)
    return moved


def settle_trial(
    ctx: Context,
    trial: Trial,
    target: TrialState,
    reason: str,
    *,
    still_running: Collection[str] = (),
) -> bool:
    """Move ``trial`` off its GPUs to PENDING (requeued: resumes from its checkpoint, no
    restart used) or CANCELLED, in one conditional write with its agents, and wake the
    scheduler (GPUs were freed); False if the trial or an agent changed since it was read."""
    now = ctx.clock.now()
    instances: dict[str, Instance] = {}
    for instance_id in trial.placement.instance_ids if trial.placement else ():
        record = ctx.store.get_instance(instance_id)
        if record is not None:
            instances[instance_id] = record
    if target is TrialState.PENDING:
        moved, freed = requeue(trial, instances, now, reason, still_running=still_running)
        kind = EventKind.TRIAL_REQUEUED
    else:
        moved, freed = move_off_gpus(trial, target, instances, now, reason)
        kind = EventKind.TRIAL_STATE
    try:
        ctx.store.commit([moved, *freed])
    except ConflictError:
        return False
    ctx.store.append_events(
        [
            Event(
                now,
                kind,
                f"{moved.state.value}: {reason}",
                pool=moved.pool,
                trial_id=moved.id,
                experiment_id=moved.experiment_id,
            )
        ]
    )
    wake_scheduler(ctx, f"{moved.id} left its GPUs: {reason}")
    return True
