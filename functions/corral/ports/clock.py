"""The clock port. Every deadline is computed from an injected clock, never from time.time()
in the domain, so tests, the simulator and the local stack can run time at their own pace."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (or since the start of a simulation)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()
