"""Time, injected: the agent never reads the clock or sleeps except through these objects,
so tests drive heartbeats, notices and the dead man's switch with a fake clock."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: deadlines and intervals."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch: log timestamps and notice times."""


class Sleeper(Protocol):
    def sleep(self, seconds: float) -> None: ...

    def wake(self) -> None:
        """Cut a sleep short (a signal arrived); harmless when nobody sleeps."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class EventSleeper:
    """Sleeps on an Event so a SIGTERM handler can wake the main loop at once."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._event.wait(seconds)
        self._event.clear()

    def wake(self) -> None:
        self._event.set()
