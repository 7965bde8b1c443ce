"""Reconcile (timer): compare the cloud's listing with the records and repair both ways.

Cloud listings are for this pass only, never for hot paths. The listing is read *before* the
records (the reconciler's stray rule depends on that order). Terminal records are not
scanned: only those an owned instance still points at are fetched, by id.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import assert_never

from corral.domain import reconcile_decisions as rd
from corral.domain.backoff import on_boot_failure
from corral.domain.errors import ConflictError
from corral.domain.instance import LIVE_STATES, Instance
from corral.domain.reconciler import reconcile
from corral.domain.records import Event, EventKind, PoolState
from corral.domain.retired_pools import with_retired
from corral.ports.commands import LaunchInstance, send
from corral.ports.store import retry_on_conflict
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.instance_removal import mark_terminated, terminate
from corral.services.shared.lost_agents import declare_lost
from corral.services.shared.service_context import Context
from corral.services.trial_deadlines import settle_overdue_trials


@dataclass
class ReconcileReport:
    # One line per applied decision, for the log: "<DecisionType>:<subject id>".
    applied: list[str] = field(default_factory=list)
    # Applied decisions per type, for the metrics.
    counts: Counter[str] = field(default_factory=Counter)
    conflicts: int = 0
    # Trials requeued or cancelled because no agent moved them on in time.
    overdue_trials: list[str] = field(default_factory=list)

    @property
    def terminations(self) -> int:
        return self.counts[rd.Terminate.__name__] + self.counts[rd.TerminateCloud.__name__]

    def note(self, decision: rd.Decision) -> None:
        subject = getattr(decision, "record", None)
        name = (
            subject.id
            if isinstance(subject, Instance)
            else getattr(decision, "cloud_id", getattr(decision, "request_id", "?"))
        )
        kind = type(decision).__name__
        self.counts[kind] += 1
        self.applied.append(f"{kind}:{name}")


def run_reconcile(ctx: Context) -> ReconcileReport:
    report = ReconcileReport()
    cloud = ctx.cloud.list_owned()
    spot_requests = ctx.cloud.list_spot_requests()
    records = {r.id: r for r in ctx.store.instances(states=LIVE_STATES)}
    for ci in cloud:
        if ci.record_id and ci.record_id not in records:
            fetched = ctx.store.get_instance(ci.record_id)
            if fetched is not None:
                records[fetched.id] = fetched
    heartbeats = ctx.store.heartbeats(list(records))
    now = ctx.clock.now()
    # Pools removed from the config while our records still name them are wound down.
    pools = with_retired(ctx.pools, (r.pool for r in records.values()))
    plan = reconcile(
        pools,
        list(records.values()),
        cloud,
        spot_requests,
        heartbeats,
        now,
        ctx.settings.reconcile,
    )
    for decision in plan.decisions:
        try:
            _apply(ctx, decision)
        except ConflictError:
            report.conflicts += 1  # the record moved on since we read it; next pass
        else:
            report.note(decision)
    _count_boot_failures(ctx, plan.boot_failures_by_pool)
    report.overdue_trials = settle_overdue_trials(ctx)
    return report


def _apply(ctx: Context, decision: rd.Decision) -> None:
    """One path per decision: record decisions are written as their ``apply`` returns them
    (conditionally on the version read), then the side effect the decision names."""
    now = ctx.clock.now()
    match decision:
        case rd.MarkTerminated():
            mark_terminated(ctx, decision.apply(now))
        case rd.MarkLost():
            declare_lost(ctx, decision)  # trials requeued, instance terminated
        case rd.Terminate():
            terminate(ctx, decision.apply(now), EventKind.INSTANCE_TERMINATING)
        case rd.Requeue():
            requeued = decision.apply(now)
            records: list[Instance | PoolState] = [requeued]
            if decision.mark_unavailable:
                records.append(_mark(ctx, requeued.pool, decision.mark_unavailable, now))
            ctx.store.commit(records)
            send(ctx.queue, [LaunchInstance.of(requeued)])
            _event(ctx, EventKind.LAUNCH_FAILED, decision)
        case rd.Adopt():
            ctx.store.commit([decision.apply(now)])
            _event(ctx, EventKind.INSTANCE_ADOPTED, decision)
        case rd.FailAllocation():
            ctx.store.commit([decision.apply(now)])
            _event(ctx, EventKind.LAUNCH_FAILED, decision)
        case rd.MarkStopped():
            ctx.store.commit([decision.apply(now)])
        case rd.StopCloud():
            # Re-read: a warm start may have taken the record since the listing (stopping
            # its instance now would strand the demand it was started for).
            current = ctx.store.get_instance(decision.record_id or "")
            if current is None or not current.is_parked:
                return
            ctx.cloud.stop([decision.cloud_id])
            _cloud_event(ctx, EventKind.INSTANCE_STOPPED, decision, decision.cloud_id)
        case rd.TerminateCloud():
            ctx.cloud.terminate([decision.cloud_id])
            record = ctx.store.get_instance(decision.record_id) if decision.record_id else None
            # An orphan has no live record; otherwise this repeats a termination we own.
            orphan = record is None or not record.is_live
            kind = EventKind.ORPHAN_TERMINATED if orphan else EventKind.INSTANCE_TERMINATING
            _cloud_event(ctx, kind, decision, decision.cloud_id)
        case rd.CancelSpotRequest():
            ctx.cloud.cancel_spot_requests([decision.request_id])
            if decision.mark_unavailable:
                ctx.store.commit([_mark(ctx, decision.pool, decision.mark_unavailable, now)])
            _cloud_event(ctx, EventKind.SPOT_REQUEST_CANCELLED, decision, decision.request_id)
        case _:
            assert_never(decision)


def _cloud_event(
    ctx: Context,
    kind: EventKind,
    decision: rd.StopCloud | rd.TerminateCloud | rd.CancelSpotRequest,
    subject: str,
) -> None:
    """Log a cloud decision: what it acted on (an instance or a spot request), and why."""
    event = Event(
        ctx.clock.now(),
        kind,
        f"{subject}: {decision.reason}",
        pool=decision.pool,
        instance_id=decision.record_id,
    )
    ctx.store.append_events([event])


def _mark(ctx: Context, pool_name: str, offering_key: str, now: float) -> PoolState:
    state = ctx.store.pool_state(pool_name)
    pool = ctx.pool(pool_name)
    memory = state.capacity.marked_unavailable(
        offering_key, now, pool.capacity_memory_s if pool else 180.0
    )
    return replace(state, capacity=memory)


def _count_boot_failures(ctx: Context, failures: Mapping[str, int]) -> None:
    threshold = ctx.settings.reconcile.breaker_threshold
    for pool_name, count in failures.items():

        def step(pool_name: str = pool_name, count: int = count) -> str | None:
            new = ctx.store.pool_state(pool_name)
            message = None
            for _ in range(count):
                new, opened = on_boot_failure(new, ctx.clock.now(), threshold)
                message = opened or message
            ctx.store.commit([new])
            return message

        with contextlib.suppress(ConflictError):  # lost thrice: the next pass counts again
            message = retry_on_conflict(step)
            if message:
                ctx.store.append_events(
                    [Event(ctx.clock.now(), EventKind.BREAKER_OPEN, message, pool=pool_name)]
                )


def _event(ctx: Context, kind: EventKind, decision: rd.RecordDecision) -> None:
    log_instance_event(ctx, decision.record, kind, decision.reason, ctx.clock.now())
