"""Warm start: bring a stopped instance of the pool's warm pool back for waiting demand.

The schedule pass took the record STOPPED -> QUEUED (a new attempt) for a planned launch;
this runs on its launch message, like a launch and with the same rules: intent first
(QUEUED -> REQUESTED is written before the cloud is called), a start call that is idempotent
(starting a running instance confirms it), and errors acted on by class. What differs:
a refusal for capacity sends the record back to the warm pool (it is still stopped and may
start later) and wakes the scheduler, whose planner then launches elsewhere, since the
offering is remembered as refused; quota and permission refusals back the pool off and an
unknown error counts against launch_error_retries, the instance staying in the warm pool;
only a start that cannot work (not ours, gone) or retries used up give the instance up.
"""

from __future__ import annotations

from dataclasses import replace

from corral.domain.backoff import (
    LaunchVerdict,
    blocked_reason,
    on_launch_success,
)
from corral.domain.errors import ConflictError, LaunchError
from corral.domain.instance import Instance, InstanceState
from corral.domain.records import EventKind, PoolState
from corral.ports.commands import LaunchInstance, send
from corral.ports.store import commit_one
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.instance_removal import terminate, wake_scheduler
from corral.services.shared.launch_outcome import (
    LaunchOutcome,
    launch_error_event,
    pool_verdict,
)
from corral.services.shared.launch_retry import retry_when_it_may_go
from corral.services.shared.service_context import Context

# A start refused because the instance is still stopping is asked again this much later.
STILL_STOPPING_RETRY_S = 15.0


def start_warm(ctx: Context, record: Instance) -> LaunchOutcome:
    """Start ``record``'s stopped instance (QUEUED or REQUESTED warm start)."""
    if record.state is InstanceState.QUEUED:
        requested = _request(ctx, record)
        if not isinstance(requested, Instance):
            return requested
        record = requested
    assert record.cloud_id is not None
    try:
        result = ctx.cloud.start(record.cloud_id, record.launch_token)
    except LaunchError as error:
        return _refused(ctx, record, error)
    now = ctx.clock.now()
    started = replace(
        record.transition(InstanceState.ALLOCATED, now, f"started {record.cloud_id} again"),
        launched_at=result.launched_at if result.launched_at is not None else now,
        launch_failures=0,
    )
    state = ctx.store.pool_state(record.pool)
    fresh = on_launch_success(state)
    try:
        ctx.store.commit([started] if fresh is state else [started, fresh])
    except ConflictError:
        return LaunchOutcome.SKIPPED  # a duplicate delivery (or reconcile) recorded it
    message = f"warm start of {record.cloud_id} ({record.offering.key})"
    log_instance_event(ctx, started, EventKind.LAUNCH_REQUESTED, message, now)
    return LaunchOutcome.LAUNCHED


def _request(ctx: Context, record: Instance) -> Instance | LaunchOutcome:
    now = ctx.clock.now()
    state = ctx.store.pool_state(record.pool)
    pool = ctx.pool(record.pool)
    if pool is None:
        return LaunchOutcome.WAITING
    if blocked_reason(state, now) is not None:
        retry_when_it_may_go(ctx, pool, record, now)
        return LaunchOutcome.WAITING
    if not state.capacity.is_available(record.offering.key, now):
        reason = f"{record.offering.key} was refused recently: it stays warm"
        _back_to_pool(ctx, record, reason)
        return LaunchOutcome.WAITING
    requested = replace(
        record.transition(InstanceState.REQUESTED, now, f"starting {record.cloud_id} again"),
        requested_at=now,
    )
    try:
        return commit_one(ctx.store, requested)
    except ConflictError:
        return LaunchOutcome.SKIPPED


def _refused(ctx: Context, record: Instance, error: LaunchError) -> LaunchOutcome:
    """Act on a refused start by class, as a launch does, except that the instance stays in
    the warm pool unless it cannot be started at all (an invalid config here means it is
    not ours any more, gone, or not startable) or its retries for unknown errors ran out."""
    cls = error.error_class
    if cls.retries_same_attempt:
        # Throttled, or still stopping: the same attempt again soon (the start is idempotent).
        send(ctx.queue, [LaunchInstance.of(record)], delay_s=STILL_STOPPING_RETRY_S, dedupe=False)
        return LaunchOutcome.RETRYING
    pool = ctx.pool(record.pool)
    if cls.fails_record or pool is None:
        return _give_up(ctx, record, error)
    # Capacity and price: the offering is remembered as refused; quota and permission: the
    # pool backs off; unknown: counted against launch_error_retries.
    state = ctx.store.pool_state(record.pool)
    new_state, action = pool_verdict(ctx, pool, state, record, error)
    if action.verdict is LaunchVerdict.FAIL_RECORD:
        return _give_up(ctx, record, error)
    failed = replace(
        record,
        launch_failures=record.launch_failures + int(action.counts_against_attempts),
        last_error=str(error),
    )
    reason = f"{action.reason}: the instance stays in the warm pool"
    changed = new_state if new_state is not state else None
    _back_to_pool(ctx, failed, reason, changed, launch_error_event(cls))
    return LaunchOutcome.WAITING


def _give_up(ctx: Context, record: Instance, error: LaunchError) -> LaunchOutcome:
    reason = f"{error.code}: the cloud would not start it; given up"
    giving_up = replace(
        record.transition(InstanceState.TERMINATING, ctx.clock.now(), reason),
        last_error=str(error),
    )
    terminate(ctx, giving_up, EventKind.INSTANCE_TERMINATING)
    wake_scheduler(ctx, f"warm start of {record.id} failed")
    return LaunchOutcome.FAILED


def _back_to_pool(
    ctx: Context,
    record: Instance,
    reason: str,
    state: PoolState | None = None,
    kind: EventKind = EventKind.OFFERING_UNAVAILABLE,
) -> None:
    now = ctx.clock.now()
    back = record.transition(InstanceState.STOPPED, now, reason)
    try:
        ctx.store.commit([back] if state is None else [back, state])
    except ConflictError:
        return  # it moved on (a duplicate delivery): that one decides
    log_instance_event(ctx, record, kind, reason, now)
    wake_scheduler(ctx, f"warm start of {record.id} refused: plan elsewhere")
