"""Instance moves shared by the reaper, the reconciler and the interruption handlers: taking
an agent away (its trials requeued in the same commit) and terminating in the cloud."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState
from corral.domain.records import Event, EventKind
from corral.domain.trial import HOLDS_GPUS, Trial, TrialState
from corral.ports.commands import Schedule, send
from corral.ports.store import Record, commit_one
from corral.services.shared.service_context import Context
from corral.services.shared.spend import close_instance_spend
from corral.services.shared.trial_release import move_off_gpus, requeue


def trials_on(ctx: Context, instance: Instance) -> list[Trial]:
    trials = [ctx.store.get_trial(t) for t in instance.trial_ids]
    return [t for t in trials if t is not None and t.state in HOLDS_GPUS]


def reporting(ctx: Context, trial_id: str, instance_ids: Sequence[str]) -> frozenset[str]:
    """Which of these agents' latest heartbeats report the trial (running or stopping)."""
    beats = ctx.store.heartbeats(list(instance_ids)) if instance_ids else {}
    return frozenset(i for i, b in beats.items() if any(r.trial_id == trial_id for r in b.trials))


def take_away(
    ctx: Context,
    updated: Instance,
    reason: str,
    *,
    extra: Sequence[Record] = (),
    still_up: bool = False,
) -> list[str]:
    """Commit ``updated`` (an agent losing its work: LOST, TERMINATED, DRAINING for an
    interruption, ...) together with its trials moved off it: running ones requeued to
    resume from their checkpoint, stopping ones cancelled. Returns the requeued trial ids.

    A trial that other agents (or, with ``still_up``, this one: a spot notice leaves it
    time to checkpoint) still report running stays PREEMPTED on their GPUs until they
    confirm it stopped, so it never runs in two places at once."""
    now = ctx.clock.now()
    instances = {updated.id: updated}
    records: list[Record] = []
    requeued: list[str] = []
    for trial in trials_on(ctx, updated):
        placed = trial.placement.instance_ids if trial.placement else ()
        for other in placed:
            if other not in instances:
                fetched = ctx.store.get_instance(other)
                if fetched is not None:
                    instances[other] = fetched
        if trial.state is TrialState.STOPPING:
            moved, freed = move_off_gpus(trial, TrialState.CANCELLED, instances, now, reason)
        else:
            asked = [i for i in placed if i != updated.id or still_up]
            running = reporting(ctx, trial.id, asked)
            moved, freed = requeue(trial, instances, now, reason, still_running=running)
            requeued.append(trial.id)
        records.append(moved)
        instances.update((inst.id, inst) for inst in freed)
    records.extend(instances.values())
    records.extend(extra)
    ctx.store.commit(records)
    if requeued:
        ctx.store.append_events(
            [
                Event(
                    now,
                    EventKind.TRIAL_REQUEUED,
                    reason,
                    pool=updated.pool,
                    trial_id=t,
                    instance_id=updated.id,
                )
                for t in requeued
            ]
        )
        wake_scheduler(ctx, f"requeued from {updated.id}")
    return requeued


def terminate(ctx: Context, record: Instance, reason: str, kind: EventKind) -> bool:
    """-> TERMINATING (written first), the cloud call, then -> TERMINATED with spend closed.
    Safe to repeat: the cloud call is idempotent and a lost race just stops here."""
    now = ctx.clock.now()
    try:
        if record.state is not InstanceState.TERMINATING:
            record = commit_one(
                ctx.store, record.transition(InstanceState.TERMINATING, now, reason)
            )
        if record.cloud_id:
            ctx.cloud.terminate([record.cloud_id])
        if record.spot_request_id:
            ctx.cloud.cancel_spot_requests([record.spot_request_id])
        mark_terminated(ctx, record, "terminated by Corral: " + reason)
    except ConflictError:
        return False
    ctx.store.append_events([Event(now, kind, reason, pool=record.pool, instance_id=record.id)])
    return True


def mark_terminated(ctx: Context, record: Instance, reason: str) -> None:
    """The cloud instance is gone: record it, requeue what ran there, close its spend."""
    now = ctx.clock.now()
    gone = record.transition(InstanceState.TERMINATED, now, reason)
    state = close_instance_spend(ctx.store.pool_state(record.pool), gone, now)
    take_away(ctx, gone, reason, extra=[state])


def wake_scheduler(ctx: Context, reason: str) -> None:
    send(ctx.queue, [Schedule(reason)])


__all__ = ["mark_terminated", "take_away", "terminate", "trials_on", "wake_scheduler"]
