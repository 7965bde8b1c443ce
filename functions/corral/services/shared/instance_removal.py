"""Instance moves shared by the reaper, the reconciler and the interruption handlers: taking
an agent away (its trials requeued in the same commit) and terminating in the cloud."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

from corral.domain.cost import compute_cost_usd
from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState
from corral.domain.records import Event, EventKind
from corral.domain.trial import HOLDS_GPUS, Trial, TrialState
from corral.ports.commands import Schedule, send
from corral.ports.store import Record, commit_one
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.service_context import Context
from corral.services.shared.spend import close_instance_spend, disk_rate
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


def terminate(ctx: Context, terminating: Instance, kind: EventKind) -> bool:
    """Write ``terminating`` (a record moved to TERMINATING by a decision's ``apply``,
    conditionally on the version it was read at), call the cloud, then -> TERMINATED with
    spend closed once the cloud confirms the instance is on its way out. Unconfirmed (the
    call failed, or the cloud does not list it yet), the record stays TERMINATING and the
    reconciler settles it from its next listing: terminated again while listed, TERMINATED
    once gone. Returns False when the write lost a race (someone else moved the record)."""
    if terminating.state is not InstanceState.TERMINATING:
        raise ValueError(f"{terminating.id} is {terminating.state.value}, not TERMINATING")
    reason = terminating.history[-1].reason
    try:
        record = commit_one(ctx.store, terminating)
        log_instance_event(ctx, record, kind, reason, ctx.clock.now())
        if record.spot_request_id:
            ctx.cloud.cancel_spot_requests([record.spot_request_id])
        if record.cloud_id is None or record.cloud_id in ctx.cloud.terminate([record.cloud_id]):
            confirmed = f"terminated by Corral: {reason}"
            gone = record.transition(InstanceState.TERMINATED, ctx.clock.now(), confirmed)
            mark_terminated(ctx, gone)
    except ConflictError:
        return False
    return True


def park(ctx: Context, empty: Instance, reason: str) -> bool:
    """Stop ``empty`` (a DRAINING agent confirmed empty) into the warm pool: write STOPPING
    with its compute spend closed (conditionally on the version it was read at), call the
    cloud, then -> STOPPED once the cloud confirms. Unconfirmed, the record stays STOPPING
    and the reconciler settles it from its next listing (stopped again while running,
    STOPPED once stopped, TERMINATED once gone). False when the write lost a race."""
    now = ctx.clock.now()
    stopping = replace(
        empty.transition(InstanceState.STOPPING, now, reason),
        closed_usd=compute_cost_usd(empty, now),
    )
    # The run's compute only: its disks bill on while it is stopped.
    state = close_instance_spend(ctx.store.pool_state(empty.pool), empty, now, 0.0)
    try:
        record = ctx.store.commit([stopping, state])[0]
    except ConflictError:
        return False
    assert isinstance(record, Instance)
    log_instance_event(ctx, record, EventKind.INSTANCE_STOPPED, reason, now)
    if record.cloud_id is not None and record.cloud_id in ctx.cloud.stop([record.cloud_id]):
        stopped = record.transition(InstanceState.STOPPED, ctx.clock.now(), "the cloud stopped it")
        with contextlib.suppress(ConflictError):
            commit_one(ctx.store, stopped)
    return True


def mark_terminated(ctx: Context, gone: Instance) -> None:
    """The cloud instance is gone: write ``gone`` (the record moved to TERMINATED) with what
    ran there moved off its GPUs (requeued or cancelled) and its spend closed, in one write."""
    now = ctx.clock.now()
    state = close_instance_spend(
        ctx.store.pool_state(gone.pool), gone, now, disk_rate(ctx.pool(gone.pool))
    )
    take_away(ctx, gone, gone.history[-1].reason, extra=[state])


def wake_scheduler(ctx: Context, reason: str) -> None:
    send(ctx.queue, [Schedule(reason)])


__all__ = ["mark_terminated", "take_away", "terminate", "trials_on", "wake_scheduler"]
