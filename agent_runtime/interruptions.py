"""Interruption watcher: polls the metadata notice endpoints every few seconds (EC2
``spot/instance-action`` and rebalance recommendations, GCE ``instance/preempted``).

A notice gives trials a grace period that fits inside it: the notice window minus a margin
kept for reporting them ``preempted`` and flushing their logs (AWS 120 s -> 110 s, GCE
30 s -> 20 s with the default 10 s margin). The agent treats SIGTERM to itself the same way.
"""

from __future__ import annotations

import logging

from agent_runtime.clock import Clock
from agent_runtime.identity import MetadataSource, Notice

log = logging.getLogger(__name__)

MIN_GRACE_S = 1.0  # even a late notice gives the trial a moment to write something


def grace_for(notice: Notice, margin_s: float) -> float:
    return max(MIN_GRACE_S, notice.window_s - margin_s)


class InterruptionWatcher:
    def __init__(self, source: MetadataSource, clock: Clock, poll_s: float) -> None:
        self._source = source
        self._clock = clock
        self._poll_s = poll_s
        self._next_poll = clock.monotonic()
        self.notice: Notice | None = None

    def poll(self) -> Notice | None:
        """A notice the first time one is seen (later polls return None); polls the metadata
        server only when due, so calling this every loop tick is cheap."""
        now = self._clock.monotonic()
        if now < self._next_poll or (self.notice is not None and self.notice.action == "preempt"):
            return None
        self._next_poll = now + self._poll_s
        notice = self._source.notice()
        if notice is None or (self.notice is not None and notice.kind == self.notice.kind):
            return None
        log.warning(
            "interruption notice: %s (%.0f s left, %s)", notice.kind, notice.window_s, notice.action
        )
        self.notice = notice
        return notice
