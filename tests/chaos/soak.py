"""The soak engine: one FakeClock, advanced in fixed steps. Each step fires the EventBridge
timers that are due (schedule and idle_reap every minute, spot_reconcile every two, as in
infra/template.yaml), steps every machine's agent, delivers what is due on the queues to
the real handlers, and lets the users act. It ends when every trial is over and every
instance is gone (or at ``max_sim_s``), then checks the invariants."""

from __future__ import annotations

import contextlib
import io
import random
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from corral.domain.instance import InstanceState
from corral.domain.trial import Trial, TrialState
from corral.handlers.aws import idle_reap, scale_up, schedule, spot_reconcile
from corral.ports.queue import QueueName
from tests.chaos import invariants as inv
from tests.chaos.agent_host import SyncTrialRun
from tests.chaos.aws import TAG_KEY, World, world
from tests.chaos.config import SoakConfig
from tests.chaos.fleet import Fleet
from tests.chaos.lambdas import FakeLambdaContext, Gateway, scheduled_event
from tests.chaos.mailbox import Mailbox
from tests.chaos.ports import Crashes, SimulatedCrash, wrap
from tests.chaos.trials import Ledger
from tests.chaos.workload import Job, Users, make_jobs

TIMERS: tuple[tuple[str, float, Callable[..., Any]], ...] = (
    ("schedule", 60.0, schedule.handler),
    ("idle_reap", 60.0, idle_reap.handler),
    ("spot_reconcile", 120.0, spot_reconcile.handler),
)
QUEUES = (
    (QueueName.SCHEDULE, "schedule", schedule.handler),
    (QueueName.SCALE_UP, "scale_up", scale_up.handler),
    (QueueName.INTERRUPTIONS, "spot_reconcile", spot_reconcile.handler),
)
STUCK_S = {TrialState.ASSIGNED: 900.0, TrialState.STOPPING: 900.0, TrialState.PREEMPTED: 600.0}
TAIL_S = 3600.0  # after the last trial ends, how long to wait for the fleet to go


@dataclass
class Result:
    cfg: SoakConfig
    violations: dict[str, list[str]]
    faults: Counter[str]
    recovered: Counter[str]
    figures: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.violations.values())


class Soak:
    def __init__(self, cfg: SoakConfig, w: World, work_root: Path) -> None:
        self.cfg, self.w, self.clock = cfg, w, w.clock
        r = cfg.rates
        self.crashes = Crashes(
            r.crash if cfg.on("crash") else 0.0, random.Random(cfg.seed * 41 + 9)
        )
        self.mailbox = Mailbox(
            w,
            self.clock,
            self.crashes,
            random.Random(cfg.seed * 43 + 11),
            dup=r.dup if cfg.on("dup") else 0.0,
            late=r.late if cfg.on("late") else 0.0,
            late_max_s=r.late_max_s,
        )
        wrap(w.ctx, self.crashes, self.mailbox.on_send)
        w.ec2_error_rate = r.ec2 if cfg.on("ec2") else 0.0
        self.gateway = Gateway(self.clock, self.crashes)
        self.ledger = Ledger()
        self.fleet = Fleet(cfg, w, self.gateway, self.mailbox, self.ledger, work_root)
        self.jobs: list[Job] = make_jobs(cfg)
        self.start = self.clock.now()
        self.users = Users(self.jobs, self.gateway, self.clock, self.start)
        self.timer_failures: Counter[str] = Counter()
        self.next_timer = {name: self.start + period for name, period, _ in TIMERS}
        self.outages = self._plan_outages(random.Random(cfg.seed * 47 + 13))
        self.stuck: dict[str, str] = {}
        self.reaper_deaths: list[float] = []
        self.trials: dict[str, Trial] = {}
        self.last_end = self.start
        self.foreign_before = self._make_foreign()

    # ---- set-up -----------------------------------------------------------------------
    def _make_foreign(self) -> dict[str, dict[str, Any]]:
        if not self.cfg.on("foreign"):
            return {}
        ids = [self.w.run_foreign({"Name": "someone-elses-box"})]
        for n in range(max(0, self.cfg.rates.foreign - 1)):
            ids.append(self.w.run_foreign({TAG_KEY: f"another-team-{n}", "corral-pool": "gpu"}))
        self.fleet.faults["foreign"] += len(ids)
        described = self.w.describe()
        return {i: described[i] for i in ids}

    def _plan_outages(self, rng: random.Random) -> list[tuple[float, float]]:
        if not self.cfg.on("outage"):
            return []
        spread = max(600.0, self.cfg.spread_s)
        starts = sorted(rng.uniform(300.0, spread) for _ in range(self.cfg.rates.outages))
        return [(self.start + s, rng.uniform(30.0, 80.0)) for s in starts]

    # ---- the loop ---------------------------------------------------------------------
    def run(self) -> None:
        observed_at = self.start
        while True:
            now = self.clock.advance(self.cfg.step_s)
            self._outage(now)
            self._timers(now)
            self.fleet.step()
            self.mailbox.pull()
            for queue, name, handler in QUEUES:
                self.mailbox.deliver(queue, name, handler)
            self._users(now)
            if now - observed_at >= 60.0:
                observed_at = now
                if self._observe(now):
                    return

    def _outage(self, now: float) -> None:
        for at, length in self.outages:
            if at <= now < at + self.cfg.step_s:
                self.gateway.down_until = at + length
                self.fleet.faults["outage"] += 1

    def _timers(self, now: float) -> None:
        for name, period, handler in TIMERS:
            if now < self.next_timer[name]:
                continue
            self.next_timer[name] += period
            try:
                with self.crashes.invocation(name):
                    handler(scheduled_event(f"corral-{name}", now), FakeLambdaContext(name))
            except SimulatedCrash:
                self.timer_failures[f"{name}: crashed (injected)"] += 1
                if name == "idle_reap":
                    self.reaper_deaths.append(now)
            except Exception as exc:
                self.timer_failures[f"{name}: {type(exc).__name__}: {exc}"[:200]] += 1

    def _users(self, now: float) -> None:
        held = any(j.at is None and j.experiment_id is None for j in self.jobs)
        draining = held and bool(self.w.ctx.store.instances(states=[InstanceState.DRAINING]))
        if held and now - self.start > 2 * 3600.0:
            self.users.release_held()
        self.users.step(draining)

    def _observe(self, now: float) -> bool:
        """Sample the trials; True when the run is over."""
        self.trials = {t.id: t for t in self.w.ctx.store.trials()}
        for t in self.trials.values():
            since = t.history[-1].at if t.history else t.submitted_at
            limit = STUCK_S.get(t.state)
            if limit is not None and now - since > limit and t.id not in self.stuck:
                at = since - self.start
                self.stuck[t.id] = (
                    f"{t.state.value} for over {limit / 60:.0f} min (from +{at:.0f} s)"
                )
        done = self.users.all_submitted() and all(
            t.state in inv.TERMINAL for t in self.trials.values()
        )
        if done:
            ends = [t.history[-1].at for t in self.trials.values() if t.history]
            self.last_end = max(ends, default=now)
            if self.fleet.live_ours() == 0 and self.mailbox.pending() == 0:
                return True
            if now > self.last_end + TAIL_S:
                return True
        return now - self.start > self.cfg.max_sim_s

    # ---- the verdict ------------------------------------------------------------------
    def verdict(self, wall_s: float) -> Result:
        now = self.clock.now()
        trials = {t.id: t for t in self.w.ctx.store.trials()}
        deadlines = inv.Deadlines(idle_s=self.cfg.idle_s)
        if not all(t.state in inv.TERMINAL for t in trials.values()):
            self.last_end = now
        violations = {
            "trial outcomes": inv.outcomes(self.jobs, trials),
            "ran on two agents at once": inv.overlaps(self.ledger.runs),
            "more than max_instances live": (
                [f"{self.fleet.max_live} live, max_instances is {self.cfg.max_instances}"]
                if self.fleet.max_live > self.cfg.max_instances
                else []
            ),
            "one instance per launch": inv.launches(self.fleet.lives, self.w.launches.by_token),
            "foreign instances touched": inv.foreign_untouched(
                self.foreign_before, self.w.describe()
            ),
            "billed after idle": inv.billing(
                self.fleet.lives,
                self.last_end,
                now,
                deadlines,
                self.fleet.fates(),
                self.reaper_deaths,
            ),
            "stuck trials": [f"{tid}: {why}" for tid, why in sorted(self.stuck.items())],
            "unexplained dead letters": inv.dead_letters(self.mailbox.dead),
        }
        from tests.chaos.report import tally

        faults, recovered = tally(self, violations)
        figures = {
            "seed": self.cfg.seed,
            "trials": len(trials),
            "jobs": len(self.jobs),
            "simulated_s": now - self.start,
            "wall_s": wall_s,
            "instances launched": len(self.fleet.lives),
            "max live instances": self.fleet.max_live,
            "trial runs": len(self.ledger.runs),
            "api calls": self.gateway.calls,
            "states": Counter(t.state.value for t in trials.values()),
        }
        warnings = [f"{k} x{n}" for k, n in self.timer_failures.items() if "injected" not in k]
        warnings += [f"queue handler error: {k} x{n}" for k, n in self.mailbox.errors.items()]
        warnings += [f"api error: {k} x{n}" for k, n in self.gateway.errors.items()]
        warnings += [f"agent crashed: {k} x{n}" for k, n in self.fleet.agent_errors.items()]
        warnings += self.users.refusals
        return Result(self.cfg, violations, faults, recovered, figures, warnings)


def run_soak(cfg: SoakConfig) -> Result:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        # Powertools prints EMF metrics to stdout and warns about empty ones: not ours to show.
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        w = stack.enter_context(world(cfg.seed, cfg.max_instances, cfg.idle_s))
        stack.enter_context(mock.patch("agent_runtime.agent.TrialRun", SyncTrialRun))
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="corral-chaos-")))
        soak = Soak(cfg, w, root)
        soak.run()
        return soak.verdict(time.monotonic() - started)
