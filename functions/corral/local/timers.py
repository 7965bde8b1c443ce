"""EventBridge schedules, driven locally (moto never fires them): each timer calls its handler
with a real-shaped "Scheduled Event" at the template's rate.

``scale`` shortens every period (``0.25`` runs a one-minute timer every 15 s) so demos and
tests see reaping and reconcile in seconds rather than minutes, without editing the template.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from corral.local.lambda_host import FunctionHost
from corral.local.resources import TimerSource

log = logging.getLogger(__name__)


def scheduled_event(
    rule_arn: str, region: str, account: str, time: str | None = None
) -> dict[str, Any]:
    """The event an EventBridge schedule rule hands its function (the tests build theirs
    here too); ``time`` as ``2025-01-01T00:00:00Z``, now when left out."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": time or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


class Timer:
    def __init__(
        self,
        source: TimerSource,
        host: FunctionHost,
        region: str,
        account: str,
        stop: threading.Event,
        scale: float = 1.0,
        first_after_s: float | None = None,
    ) -> None:
        self.source = source
        self.period_s = max(0.5, source.rate_s * scale)
        self._first_after_s = self.period_s if first_after_s is None else first_after_s
        self._host = host
        self._region = region
        self._account = account
        self._stop = stop
        self.fired = 0
        self.thread = threading.Thread(target=self._run, name=f"timer-{source.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def fire(self) -> None:
        event = scheduled_event(self.source.rule_arn, self._region, self._account)
        try:
            self._host.invoke(self.source.function, event)
        except Exception:
            # EventBridge retries async invocations; the next tick is our retry.
            log.exception("timer %s: %s failed", self.source.name, self.source.function.logical_id)
        self.fired += 1

    def _run(self) -> None:
        # A fixed cadence from the start, like EventBridge, not "period after the last run".
        next_at = time.monotonic() + self._first_after_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.fire()
            next_at += self.period_s
            if next_at < time.monotonic():  # a slow run: skip missed ticks, do not burst
                next_at = time.monotonic() + self.period_s
