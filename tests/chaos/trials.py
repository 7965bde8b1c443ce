"""Simulated trials: an executor for the real agent whose trials run for a simulated time on
the soak's clock, checkpoint every minute of progress, resume from ``CORRAL_LATEST_CHECKPOINT``,
trap SIGTERM (checkpoint, exit 143 a few seconds later) and exit with the code their spec
chooses. Every run is recorded in the ``Ledger``, which the invariants read.

A trial's spec travels in its hyperparameters (``spec``) or, for a command, its argv:
``<key>:<seconds>:<behaviour>``, behaviour ``ok`` (exit 0), ``flaky`` (the first run exits 1
halfway, later runs succeed) or ``bad`` (every run exits 3 a third of the way in).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from agent_runtime.executors import LaunchSpec, LineSink
from corral.adapters.memory import FakeClock

CHECKPOINT_EVERY_S = 60.0
EXIT_CODES = {"ok": 0, "flaky": 1, "bad": 3}


@dataclass(frozen=True)
class TrialSpec:
    key: str
    duration_s: float
    behaviour: str

    def text(self) -> str:
        return f"{self.key}:{self.duration_s:g}:{self.behaviour}"

    @classmethod
    def parse(cls, text: str) -> TrialSpec:
        key, duration, behaviour = text.split(":")
        return cls(key, float(duration), behaviour)


@dataclass
class Execution:
    trial_id: str
    cloud_id: str
    node_rank: int
    nnodes: int
    master: str
    start: float
    end: float | None = None
    exit_code: int | None = None
    ended_by: str = ""


@dataclass
class Ledger:
    runs: list[Execution] = field(default_factory=list)
    failed_once: set[str] = field(default_factory=set)  # flaky trials that used their failure

    def live(self, trial_id: str) -> list[Execution]:
        return [e for e in self.runs if e.trial_id == trial_id and e.end is None]


def spec_of(launch: LaunchSpec) -> TrialSpec:
    hparams = json.loads(launch.env.get("CORRAL_HPARAMS") or "{}")
    text = hparams.get("spec") or next((a for a in launch.command if a.count(":") == 2), None)
    if not isinstance(text, str):
        raise ValueError(f"no trial spec in {launch.command} / {hparams}")
    return TrialSpec.parse(text)


class SimHandle:
    def __init__(
        self,
        launch: LaunchSpec,
        execution: Execution,
        clock: FakeClock,
        ledger: Ledger,
        rng: random.Random,
        on_line: LineSink,
    ) -> None:
        self.launch, self.execution, self.clock, self.ledger = launch, execution, clock, ledger
        self.on_line = on_line
        spec = spec_of(launch)
        latest = launch.env.get("CORRAL_LATEST_CHECKPOINT", "")
        self.progress0 = float(latest.split(":", 1)[1]) if latest.startswith("ckpt:") else 0.0
        remaining = max(1.0, spec.duration_s - self.progress0)
        self.planned = EXIT_CODES[spec.behaviour]
        if spec.behaviour == "flaky" and launch.trial_id in ledger.failed_once:
            self.planned = 0
        fraction = {0: 1.0, 1: 0.5, 3: 1 / 3}[self.planned]
        self.end_at = clock.now() + remaining * fraction
        self.stop_delay = rng.uniform(1.0, 8.0)
        self.term_at: float | None = None
        self.code: int | None = None
        self.written = int(self.progress0 // CHECKPOINT_EVERY_S)
        on_line("stdout", f"start {spec.text()} from {self.progress0:.0f}s")

    # ---- TrialHandle -----------------------------------------------------------------
    def poll(self) -> int | None:
        if self.code is not None:
            return self.code
        now = self.clock.now()
        self._checkpoint(now)
        if self.term_at is not None and now >= self.term_at + self.stop_delay:
            self._checkpoint(now, force=True)
            self.end(143, "sigterm")
        elif now >= self.end_at:
            if self.planned == 1:
                self.ledger.failed_once.add(self.launch.trial_id)
            self.end(self.planned, "exit")
        return self.code

    def terminate(self) -> None:
        if self.term_at is None:
            self.term_at = self.clock.now()

    def kill(self) -> None:
        if self.code is None:
            self.end(137, "sigkill")

    def cleanup(self) -> None:
        pass

    # ---- the soak ----------------------------------------------------------------------
    def end(self, code: int, how: str) -> None:
        self.code = code
        self.execution.end = self.clock.now()
        self.execution.exit_code = code
        self.execution.ended_by = how
        self.on_line("stdout", f"end {how} {code}")

    def checkpoint_now(self) -> None:
        self._checkpoint(self.clock.now(), force=True)

    def _checkpoint(self, now: float, force: bool = False) -> None:
        progress = self.progress0 + (now - self.execution.start)
        mark = int(progress // CHECKPOINT_EVERY_S)
        if mark <= self.written and not force:
            return
        self.written = mark
        directory = Path(self.launch.checkpoint_dir)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "latest").write_text(f"ckpt:{progress:.0f}\n")


class SimExecutor:
    name = "sim"
    in_container = False

    def __init__(self, cloud_id: str, clock: FakeClock, ledger: Ledger, rng: random.Random) -> None:
        self.cloud_id, self.clock, self.ledger, self.rng = cloud_id, clock, ledger, rng
        self.handles: list[SimHandle] = []

    def launch(self, spec: LaunchSpec, on_line: LineSink) -> SimHandle:
        env = spec.env
        execution = Execution(
            trial_id=spec.trial_id,
            cloud_id=self.cloud_id,
            node_rank=int(env.get("NODE_RANK", "0")),
            nnodes=int(env.get("NNODES", "1")),
            master=env.get("MASTER_ADDR", ""),
            start=self.clock.now(),
        )
        self.ledger.runs.append(execution)
        handle = SimHandle(spec, execution, self.clock, self.ledger, self.rng, on_line)
        self.handles.append(handle)
        return handle

    def stop_leftovers(self, grace_s: float) -> list[str]:
        """A fresh agent process stops what an earlier one left running here: SIGTERM,
        which the simulated trials trap (checkpoint, exit) well within ``grace_s``."""
        stopped = []
        for handle in self.handles:
            if handle.code is None:
                handle.checkpoint_now()
                handle.end(143, "leftover-stopped")
                stopped.append(handle.launch.trial_id)
        return sorted(set(stopped))

    def kill_all(self, how: str) -> None:
        """The machine or the agent's cgroup went away: every trial dies with it."""
        for handle in self.handles:
            if handle.code is None:
                handle.end(137, how)
