"""Scale-up: turn one QUEUED instance record into a cloud instance, exactly once.

Intent before side effect: QUEUED -> REQUESTED is written (conditionally) before the cloud is
called, and the call carries a token derived from the record id and attempt, so a message
delivered twice, or a function that dies after the call, never launches a second instance:
the duplicate finds the record REQUESTED and repeats the call with the *same* token, which the
cloud answers with the instance it already made (and reconcile adopts by tag what a crash
left unrecorded). Errors act by class (see ``corral.domain.backoff``).
"""

from __future__ import annotations

from dataclasses import replace

from corral.domain.backoff import (
    LaunchVerdict,
    blocked_reason,
    on_launch_success,
)
from corral.domain.errors import ConflictError, LaunchError
from corral.domain.fallback import allowed_offerings
from corral.domain.instance import Instance, InstanceState
from corral.domain.offerings import Offering
from corral.domain.records import Event, EventKind
from corral.ports.cloud import LaunchRequest
from corral.ports.commands import LaunchInstance, send
from corral.ports.store import commit_one
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.instance_removal import wake_scheduler
from corral.services.shared.launch_outcome import (
    LaunchOutcome,
    launch_error_event,
    pool_verdict,
)
from corral.services.shared.launch_retry import retry_when_it_may_go, waiting_trials
from corral.services.shared.service_context import Context
from corral.services.warm_start import start_warm

__all__ = ["LaunchOutcome", "launch_instance"]


def launch_instance(ctx: Context, instance_id: str, attempt: int) -> LaunchOutcome:
    record = ctx.store.get_instance(instance_id)
    if record is None or record.attempt != attempt:
        return LaunchOutcome.SKIPPED
    if record.is_warm_start:
        return start_warm(ctx, record)
    if record.state is InstanceState.QUEUED:
        started = _start_attempt(ctx, record)
        if not isinstance(started, Instance):
            return started
        record = started
    elif not (
        record.state is InstanceState.REQUESTED
        and record.cloud_id is None
        and record.spot_request_id is None
    ):
        return LaunchOutcome.SKIPPED
    return _call_cloud(ctx, record)


def _start_attempt(ctx: Context, record: Instance) -> Instance | LaunchOutcome:
    now = ctx.clock.now()
    pool = ctx.pool(record.pool)
    state = ctx.store.pool_state(record.pool)
    if pool is None:
        return LaunchOutcome.WAITING
    if (
        blocked_reason(state, now) is not None
        or (offering := _available_offering(ctx, record, now)) is None
    ):
        retry_when_it_may_go(ctx, pool, record, now)
        return LaunchOutcome.WAITING
    if offering.slots != record.offering.slots:
        return _replan(ctx, record, offering, now)
    requested = replace(
        record.transition(InstanceState.REQUESTED, now, f"launching {offering.key}"),
        offering=offering,
        requested_at=now,
        stoppable=pool.warm_pool_size > 0,
    )
    try:
        return commit_one(ctx.store, requested)
    except ConflictError:
        return LaunchOutcome.SKIPPED  # another delivery of this message got there first


def _available_offering(ctx: Context, record: Instance, now: float) -> Offering | None:
    """The planned offering, or, if the cloud refused it since, the cheapest available one
    of the pool with as many GPUs, else with more (so the planned demand still fits). A
    planned spot launch becomes on-demand only once a trial it is for may fall back (it
    waited the pool's on_demand_fallback_after): until then it waits for spot."""
    capacity = ctx.store.pool_state(record.pool).capacity
    if capacity.is_available(record.offering.key, now):
        return record.offering
    pool = ctx.pool(record.pool)
    if pool is None:
        return None
    candidates = [
        o
        for o in pool.offerings()
        if o.slots >= record.offering.slots and capacity.is_available(o.key, now)
    ]
    if record.offering.is_spot:
        candidates = allowed_offerings(pool, candidates, waiting_trials(ctx, record), now)
    return min(
        candidates,
        key=lambda o: (o.slots != record.offering.slots, o.hourly_price, not o.is_spot),
        default=None,
    )


def _replan(ctx: Context, record: Instance, bigger: Offering, now: float) -> LaunchOutcome:
    """The planned offering was refused and only a bigger one is left: cancel the record and
    wake the planner instead of buying the bigger one for this record's demand alone. The
    records of one plan are refused together; each buying its own bigger instance bought,
    for four 1-GPU trials, four 4-GPU instances where the planner packs them onto one."""
    reason = (
        f"{record.offering.key} is unavailable and only bigger offerings ({bigger.key}) are "
        "left: its demand is planned again"
    )
    try:
        commit_one(ctx.store, record.transition(InstanceState.CANCELLED, now, reason))
    except ConflictError:
        return LaunchOutcome.SKIPPED
    log_instance_event(ctx, record, EventKind.LAUNCH_CANCELLED, reason, now)
    wake_scheduler(ctx, f"replan the demand of {record.id}")
    return LaunchOutcome.REPLANNED


def _call_cloud(ctx: Context, record: Instance) -> LaunchOutcome:
    request = LaunchRequest(
        record.id, record.pool, record.offering, record.launch_token, stoppable=record.stoppable
    )
    try:
        result = ctx.cloud.launch(request)
    except LaunchError as error:
        return _on_error(ctx, record, error)
    now = ctx.clock.now()
    if result.cloud_id is not None:
        updated = replace(
            record.transition(InstanceState.ALLOCATED, now, f"cloud instance {result.cloud_id}"),
            cloud_id=result.cloud_id,
            spot_request_id=result.spot_request_id,
            launched_at=result.launched_at if result.launched_at is not None else now,
        )
        outcome = LaunchOutcome.LAUNCHED
    else:
        updated = replace(record, spot_request_id=result.spot_request_id)
        outcome = LaunchOutcome.SPOT_REQUEST_OPEN
    state = ctx.store.pool_state(record.pool)
    fresh_state = on_launch_success(state)
    try:
        ctx.store.commit([updated] if fresh_state is state else [updated, fresh_state])
    except ConflictError:
        # Someone else recorded this launch (a duplicate delivery with the same token got
        # the same instance), or reconcile adopted it: the instance is accounted for.
        return LaunchOutcome.SKIPPED
    ctx.store.append_events(
        [
            Event(
                now,
                EventKind.LAUNCH_REQUESTED,
                f"{record.offering.key}: {result.cloud_id or result.spot_request_id}",
                pool=record.pool,
                instance_id=record.id,
            )
        ]
    )
    return outcome


def _on_error(ctx: Context, record: Instance, error: LaunchError) -> LaunchOutcome:
    now = ctx.clock.now()
    pool = ctx.pool(record.pool)
    assert pool is not None
    state = ctx.store.pool_state(record.pool)
    new_state, action = pool_verdict(ctx, pool, state, record, error)
    verdict = action.verdict
    if verdict is LaunchVerdict.RETRY_SAME_ATTEMPT:
        send(ctx.queue, [LaunchInstance.of(record)], delay_s=action.delay_s, dedupe=False)
        return LaunchOutcome.RETRYING
    if verdict is LaunchVerdict.FAIL_RECORD:
        updated = replace(
            record.transition(InstanceState.ALLOCATION_FAILED, now, action.reason),
            last_error=str(error),
        )
        outcome = LaunchOutcome.FAILED
    else:
        updated = replace(
            record.transition(InstanceState.QUEUED, now, action.reason),
            attempt=record.attempt + 1,
            launch_failures=record.launch_failures + int(action.counts_against_attempts),
            last_error=str(error),
        )
        outcome = (
            LaunchOutcome.WAITING
            if verdict is LaunchVerdict.WAIT_FOR_POOL
            else (LaunchOutcome.RETRYING)
        )
    try:
        ctx.store.commit([updated, new_state] if new_state is not state else [updated])
    except ConflictError:
        return LaunchOutcome.SKIPPED
    kind = launch_error_event(error.error_class)
    ctx.store.append_events(
        [
            Event(
                now,
                kind,
                # Most reasons start with the code already; say it once.
                action.reason if error.code in action.reason else f"{error.code}: {action.reason}",
                pool=record.pool,
                instance_id=record.id,
                data={"code": error.code, "class": error.error_class.value},
            )
        ]
    )
    if verdict in (LaunchVerdict.TRY_OTHER_OFFERING, LaunchVerdict.RETRY_NEW_ATTEMPT):
        send(ctx.queue, [LaunchInstance.of(updated)], delay_s=action.delay_s)
    return outcome
