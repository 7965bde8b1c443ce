"""What one launch message came to (scale-up's answer, for metrics and the simulator)."""

from __future__ import annotations

from enum import StrEnum


class LaunchOutcome(StrEnum):
    LAUNCHED = "launched"
    SPOT_REQUEST_OPEN = "spot_request_open"
    SKIPPED = "skipped"  # stale or duplicate message, or the record moved on
    WAITING = "waiting"  # pool backed off or no offering: the schedule pass re-drives it
    RETRYING = "retrying"
    FAILED = "failed"
