"""EC2's instance state names and what each means to Corral.

Its own module because two adapters read it: the provider (``DescribeInstances`` replies)
and the event parser (state-change events). The parser's pydantic models are built when
it is imported; only ``spot_reconcile`` parses events, so the provider, which every
function loads, must not pull them in through this table.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.domain.cloud_view import CloudState

# EC2's instance state names (API replies and state-change events alike).
EC2_STATES: Mapping[str, CloudState] = {
    "pending": CloudState.PENDING,
    "running": CloudState.RUNNING,
    "stopping": CloudState.STOPPING,
    "stopped": CloudState.STOPPED,
    "shutting-down": CloudState.TERMINATING,
    "terminated": CloudState.TERMINATED,
}

__all__ = ["EC2_STATES"]
