"""A clock that only moves when a test, the simulator or the local stack moves it."""

from __future__ import annotations

import threading

# A realistic epoch (2023-11-14) rather than 0: code that treats 0.0 as "never" (backoff
# deadlines, ``events(since=0.0)``) then behaves as it will in production.
DEFAULT_START = 1_700_000_000.0


class FakeClock:
    """Implements ``corral.ports.clock.Clock``. Monotonic: it never goes backwards."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds})")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, t: float) -> None:
        """Jump to ``t``; jumping backwards is a bug in the caller, so it raises."""
        with self._lock:
            if t < self._now:
                raise ValueError(f"a clock cannot go backwards ({t} < {self._now})")
            self._now = float(t)

    def __repr__(self) -> str:
        return f"FakeClock({self._now!r})"
