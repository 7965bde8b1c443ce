"""What one launch message came to (scale-up's answer, for metrics and the simulator), and
how a refused one is logged."""

from __future__ import annotations

from enum import StrEnum

from corral.domain.backoff import LaunchErrorAction, on_launch_error
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.instance import Instance
from corral.domain.policy import PoolPolicy
from corral.domain.records import EventKind, PoolState
from corral.services.shared.service_context import Context


class LaunchOutcome(StrEnum):
    LAUNCHED = "launched"
    SPOT_REQUEST_OPEN = "spot_request_open"
    SKIPPED = "skipped"  # stale or duplicate message, or the record moved on
    WAITING = "waiting"  # pool backed off or no offering: the schedule pass re-drives it
    RETRYING = "retrying"
    FAILED = "failed"
    # Its offering was refused and only bigger ones are left: cancelled, the planner re-plans.
    REPLANNED = "replanned"


def launch_error_event(error_class: LaunchErrorClass) -> EventKind:
    """The event a refused launch (or warm start) is logged as."""
    if error_class.marks_offering_unavailable:
        return EventKind.OFFERING_UNAVAILABLE
    if error_class.backs_off_pool:
        return EventKind.POOL_BACKOFF
    return EventKind.LAUNCH_FAILED


def pool_verdict(
    ctx: Context, pool: PoolPolicy, state: PoolState, record: Instance, error: LaunchError
) -> tuple[PoolState, LaunchErrorAction]:
    """What a refused launch or start of ``record`` means for its pool (the offering
    remembered as refused, a backoff) and for the record (``corral.domain.backoff``).
    ``state``: the pool's stored state; the same object comes back when the error changes
    nothing of it, so the caller writes it only when it changed."""
    return on_launch_error(
        state,
        error.error_class,
        error.code,
        ctx.clock.now(),
        pool,
        ctx.rng,
        offering=record.offering,
        failures=record.launch_failures,
    )
