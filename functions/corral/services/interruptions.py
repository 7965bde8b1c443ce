"""Interruption notices and cloud state changes (EventBridge on AWS, the agent's metadata
watcher on both clouds): checkpoint-and-requeue at once, and plan the replacement now rather
than after the instance has gone silent."""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from corral.domain.errors import ConflictError
from corral.domain.instance import HOLDS_CLOUD_INSTANCE, InstanceState
from corral.domain.records import EventKind
from corral.ports.store import retry_on_conflict
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.instance_removal import mark_terminated, take_away, wake_scheduler
from corral.services.shared.service_context import Context


class NoticeKind(StrEnum):
    INTERRUPTION = "interruption"  # EC2 spot interruption warning / GCE preemption
    REBALANCE = "rebalance"  # EC2 rebalance recommendation: elevated risk, no deadline yet


def on_interruption_notice(ctx: Context, cloud_id: str, kind: NoticeKind) -> bool:
    """Drain the agent and requeue its trials (the agent is told to stop them, which makes
    them checkpoint; the replacement resumes from that checkpoint). A rebalance
    recommendation only stops new work from landing there. Returns False for an instance
    that is not ours or is already handled (notices arrive more than once)."""

    def step() -> bool:
        record = ctx.store.instance_by_cloud_id(cloud_id)
        if record is None or record.state not in HOLDS_CLOUD_INSTANCE or record.is_parked:
            return False  # not ours, gone, or stopped (a stopped instance is not interrupted)
        if record.interruption_notice_at is not None and kind is NoticeKind.REBALANCE:
            return False
        now = ctx.clock.now()
        updated = record
        if record.state in (InstanceState.IDLE, InstanceState.BUSY):
            updated = record.transition(InstanceState.DRAINING, now, f"spot {kind.value} notice")
        if kind is NoticeKind.INTERRUPTION or updated.interruption_notice_at is None:
            updated = replace(updated, interruption_notice_at=record.interruption_notice_at or now)
        if kind is NoticeKind.INTERRUPTION:
            take_away(ctx, updated, f"spot interruption notice for {cloud_id}", still_up=True)
        else:
            ctx.store.commit([updated])
        notice = f"{kind.value} notice for {cloud_id}"
        log_instance_event(ctx, record, EventKind.SPOT_INTERRUPTION, notice, now)
        wake_scheduler(ctx, f"replace {record.id}")
        return True

    try:
        return retry_on_conflict(step)
    except ConflictError:
        return False  # it kept changing: the next notice or the reconciler handles it


def on_cloud_state(ctx: Context, cloud_id: str, state: str) -> bool:
    """An instance state-change notification. Only 'gone' states change records here;
    stopped instances are terminated by reconcile, which also covers lost notifications."""
    if state not in ("shutting-down", "terminated"):
        return False
    record = ctx.store.instance_by_cloud_id(cloud_id)
    if record is None or record.state not in HOLDS_CLOUD_INSTANCE:
        return False
    try:
        reason = f"the cloud reports {cloud_id} {state}"
        mark_terminated(ctx, record.transition(InstanceState.TERMINATED, ctx.clock.now(), reason))
    except ConflictError:
        return False
    return True
