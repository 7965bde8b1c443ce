"""The local stack's background loops (the instance emulator, the queue pollers): a step run
over and over on a thread until the stack stops, a failing step logged and retried."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any


def run_until_stopped(
    stop: threading.Event,
    step: Callable[[], Any],
    log: logging.Logger,
    what: str,
    *,
    every_s: float = 0.0,
    retry_s: float = 0.0,
) -> None:
    """Run ``step`` until ``stop`` is set, ``every_s`` apart. A failure is logged (``what``
    failed) and the step retried ``retry_s`` later; one while stopping (moto going away
    during shutdown) ends the loop quietly."""
    while not stop.is_set():
        try:
            step()
        except Exception:
            if stop.is_set():
                return
            log.exception("%s failed; retrying", what)
            stop.wait(retry_s)
            continue
        stop.wait(every_s)
