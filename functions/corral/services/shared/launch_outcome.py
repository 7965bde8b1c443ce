"""What one launch message came to (scale-up's answer, for metrics and the simulator), and
how a refused one is logged."""

from __future__ import annotations

from enum import StrEnum

from corral.domain.errors import LaunchErrorClass
from corral.domain.records import EventKind


class LaunchOutcome(StrEnum):
    LAUNCHED = "launched"
    SPOT_REQUEST_OPEN = "spot_request_open"
    SKIPPED = "skipped"  # stale or duplicate message, or the record moved on
    WAITING = "waiting"  # pool backed off or no offering: the schedule pass re-drives it
    RETRYING = "retrying"
    FAILED = "failed"


def launch_error_event(error_class: LaunchErrorClass) -> EventKind:
    """The event a refused launch (or warm start) is logged as."""
    if error_class.marks_offering_unavailable:
        return EventKind.OFFERING_UNAVAILABLE
    if error_class.backs_off_pool:
        return EventKind.POOL_BACKOFF
    return EventKind.LAUNCH_FAILED
