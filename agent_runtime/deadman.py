"""Dead man's switch: an agent that cannot reach the control plane for ``timeout_s`` shuts
its own instance down (AWS ParallelCluster does the same after 10 minutes), so a lost control
plane, a broken network or a revoked identity never leaves GPUs billing forever.

Short outages are harmless: trials keep running (until the agent's fence, see agent.py) and
every successful call resets the timer.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable

from agent_runtime.clock import Clock

log = logging.getLogger(__name__)

Runner = Callable[[list[str]], int]


def _run(command: list[str]) -> int:
    return subprocess.run(command, check=False, timeout=120).returncode


class DeadMansSwitch:
    def __init__(
        self, clock: Clock, timeout_s: float, command: list[str], runner: Runner = _run
    ) -> None:
        self._clock = clock
        self.timeout_s = timeout_s
        self._command = command
        self._runner = runner
        self._last_contact = clock.monotonic()
        self.fired = False

    def contact(self, at: float | None = None) -> None:
        """The control plane answered; ``at``: when the answered request was sent (monotonic),
        now if not given."""
        self._last_contact = self._clock.monotonic() if at is None else at

    def silent_for(self) -> float:
        return self._clock.monotonic() - self._last_contact

    def check(self) -> bool:
        """Fire if the silence has lasted too long; True only on the check that fires.
        A timeout of 0 disables the switch."""
        if self.fired or self.timeout_s <= 0 or self.silent_for() < self.timeout_s:
            return False
        self.fire(f"no contact with the control plane for {self.silent_for():.0f} s")
        return True

    def fire(self, reason: str) -> None:
        """Shut the instance down now (also used when the control plane says so)."""
        self.fired = True
        log.critical("shutting the instance down (%s): %s", reason, " ".join(self._command))
        try:
            code = self._runner(self._command)
        except (OSError, subprocess.SubprocessError) as exc:
            log.critical("shutdown command failed: %s", exc)
        else:
            if code != 0:
                log.critical("shutdown command exited with %d", code)
