"""The event-driven replay: a trace through the real services, a fake clock and a simulated
cloud.

The clock jumps from one event to the next: a job submission, a trial finishing, an agent
registering, an interruption notice or an instance vanishing, a capacity outage starting or
ending, a queued message becoming visible, and the timers. Timers run at the deployment's
rates (schedule, reap and reconcile every minute, EventBridge's shortest period) on a fixed
grid, but a tick is skipped when nothing it looks at can have changed: the schedule timer
only runs while trials wait or launches are queued, the reaper only when an idle agent
passes its deadline or an agent is draining, reconcile only after the cloud ended an
instance behind Corral's back. Everything else happens through the services exactly as the
handlers would call them: queue messages are delivered to ``dispatch``'s services, agents use
the agent protocol, interruption notices go to the interruptions service.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from corral.adapters.memory import (
    FakeClock,
    InMemoryQueue,
    InMemoryStore,
    InterruptionNotice,
    SimulatedCloud,
)
from corral.domain.config import ExperimentConfig
from corral.domain.fallback import is_fallback
from corral.domain.instance import LIVE_STATES, InstanceState
from corral.domain.offerings import Offering
from corral.domain.trial import ACTIVE_STATES, TrialState
from corral.ports.commands import LaunchInstance, parse
from corral.ports.queue import QueueName
from corral.services.dispatch import dispatch
from corral.services.idle_reap import run_idle_reap
from corral.services.interruptions import NoticeKind, on_interruption_notice
from corral.services.reconcile import run_reconcile
from corral.services.scale_up import LaunchOutcome
from corral.services.schedule_pass import run_schedule_pass
from corral.services.shared.service_context import Context, SequentialIds
from corral.services.submit import SubmitError, submit_experiment
from corral.sim.model import Outage, SimulationConfig, outages
from corral.sim.policies import REAP_PERIOD_S, SimPolicy
from corral.sim.trace import Job, Trace
from corral.sim.workers import AgentLog, JobRun, Workers

TICK_S = REAP_PERIOD_S  # schedule, reap and reconcile timers: rate(1 minute)
START = 1_700_000_000.0  # any epoch: the run reports durations, not dates
IDLE_OR_DRAINING = frozenset({InstanceState.IDLE, InstanceState.DRAINING})


@dataclass
class Replay:
    """What a finished run leaves behind, for the metrics and the plot."""

    policy: str
    start: float
    end: float
    jobs: list[JobRun]
    rejected: list[str]  # jobs no pool can run (refused at submit)
    cloud: SimulatedCloud
    pending_s: float  # unbilled part of a boot (the instance is pending)
    interruptions: int
    boot_mean_s: float
    offerings: dict[str, tuple[int, float]]  # cloud id -> (GPUs, USD per hour), launched
    launch_failures: int  # launch calls the cloud refused
    outages: list[Outage]  # capacity outages injected (seconds from the start)
    startup_draws: list[float]  # agent start-up times drawn, in launch order
    on_demand: frozenset[str] = frozenset()  # cloud ids launched on-demand
    agent_logs: dict[str, list[AgentLog]] = field(default_factory=dict)  # by cloud id


@dataclass
class Engine:
    sim: SimulationConfig
    trace: Trace
    policy: SimPolicy
    seed: int
    clock: FakeClock = field(default_factory=lambda: FakeClock(START))
    _notices: list[InterruptionNotice] = field(default_factory=list)
    _boots: list[tuple[float, int, str]] = field(default_factory=list)
    _deaths: list[tuple[float, int, str]] = field(default_factory=list)
    _vanished: set[str] = field(default_factory=set)  # cloud ids reconcile must notice
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _interruptions: int = 0
    _last_reap: float = 0.0
    _launched_offerings: dict[str, tuple[int, float]] = field(default_factory=dict)
    _on_demand: set[str] = field(default_factory=set)
    _startup_draws: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        cloud_config = self.sim.cloud_config(self.seed, self.policy.stopped_usd_per_hour)
        self.cloud = SimulatedCloud(self.clock, cloud_config)
        self.cloud.on_interruption_notice(self._notices.append)
        self.store = InMemoryStore()
        self.queue = InMemoryQueue(self.clock, keep_history=False)
        self.ctx = Context(
            store=self.store,
            cloud=self.cloud,
            queue=self.queue,
            clock=self.clock,
            pools=self.policy.pools,
            default_pool=self.policy.default_pool,
            ids=SequentialIds(),
            rng=random.Random(f"{self.seed}:services"),
            policy=self.policy.scaling,
        )
        self.workers = Workers(self.ctx, self.sim.restart_overhead)
        # Pools that consolidate: their reaper also runs after GPUs were freed (a trial
        # ended or moved), when emptying an agent may have become possible; so does every
        # pool while it runs an on-demand fallback agent it moves back to spot.
        self._consolidating = any(p.consolidate for p in self.policy.pools.values())
        self._fallback_agents: set[str] = set()  # cloud ids, pruned once dead
        self._freed = False
        # Agent start-up after the instance runs (billed), one draw per launch in order.
        self._startup_rng = random.Random(f"{self.seed}:agent-start")

    # ---- the loop ---------------------------------------------------------------------
    def run(self) -> Replay:
        jobs = list(self.trace.jobs)
        horizon = max(j.submit_s + j.duration_s for j in jobs) * 1.5 + 86400.0
        offerings = list(self.policy.offerings)
        drawn = self._outages(offerings, horizon)
        toggles = sorted(
            [(o.start + START, o.offering_key, True) for o in drawn]
            + [(o.end + START, o.offering_key, False) for o in drawn]
        )
        runs: list[JobRun] = []
        rejected: list[str] = []
        next_job = next_toggle = 0
        now = self.clock.now()
        while True:
            while next_toggle < len(toggles) and toggles[next_toggle][0] <= now:
                _, key, down = toggles[next_toggle]
                self.cloud.set_unavailable(key, down)
                next_toggle += 1
            self._settle_cloud(now)
            if self.workers.complete_due(now):
                self._freed = True
            while next_job < len(jobs) and START + jobs[next_job].submit_s <= now:
                self._submit(jobs[next_job], runs, rejected)
                next_job += 1
            self._timers(now)
            self._pump()
            candidates = [
                START + jobs[next_job].submit_s if next_job < len(jobs) else None,
                toggles[next_toggle][0] if next_toggle < len(toggles) else None,
                self.workers.next_completion(),
                self._boots[0][0] if self._boots else None,
                self._deaths[0][0] if self._deaths else None,
                self.cloud.next_change_at(),
                self.queue.next_visible_at(QueueName.SCHEDULE),
                self.queue.next_visible_at(QueueName.SCALE_UP),
                *self._next_ticks(now),
            ]
            future = [t for t in candidates if t is not None and t > now]
            if next_job >= len(jobs) and self._finished():
                break
            if not future:
                break
            now = min(future)
            self.clock.set(now)
        return Replay(
            policy=self.policy.name,
            start=START,
            end=now,
            jobs=runs,
            rejected=rejected,
            cloud=self.cloud,
            pending_s=self.cloud.config.boot_s_mean,
            interruptions=self._interruptions,
            boot_mean_s=self.sim.boot.mean,
            offerings=self._launched_offerings,
            launch_failures=self.cloud.api_calls["launch"] - len(self._launched_offerings),
            outages=drawn,
            startup_draws=self._startup_draws,
            on_demand=frozenset(self._on_demand),
            agent_logs=self.workers.logs,
        )

    def _outages(self, offerings: list[Offering], horizon: float) -> list[Outage]:
        return outages(self.sim, offerings, 0.0, horizon, self.seed)

    def _finished(self) -> bool:
        if self.store.trials(states=ACTIVE_STATES):
            return False
        return not self.store.instances(states=LIVE_STATES)

    # ---- jobs -----------------------------------------------------------------------
    def _submit(self, job: Job, runs: list[JobRun], rejected: list[str]) -> None:
        config = ExperimentConfig.model_validate(
            {
                "name": job.name,
                "entrypoint": "sim",
                "resources": {"slots_per_trial": job.gpus, "priority": job.priority},
            }
        )
        try:
            submitted = submit_experiment(self.ctx, config)
        except SubmitError:
            rejected.append(job.name)
            return
        interval = job.checkpoint_interval_s or self.sim.checkpoint_interval
        for trial in submitted.trials:
            run = JobRun(job, trial.id, interval)
            self.workers.jobs[trial.id] = run
            runs.append(run)

    # ---- the cloud and the agents -----------------------------------------------------
    def _settle_cloud(self, now: float) -> None:
        self.cloud.deliver_notices()
        while self._boots and self._boots[0][0] <= now:
            _, _, cloud_id = heapq.heappop(self._boots)
            found = self.cloud.get(cloud_id)
            if found is None or found.state.is_gone:
                continue  # interrupted (or terminated) before its agent came up
            record = self.store.instance_by_cloud_id(cloud_id)
            self.workers.register(cloud_id, found.record_id, found.instance_type, found.location)
            if found.is_spot and self._fallback_agents:
                # A spot agent up while a fallback agent runs: the reaper may move its trials
                # here now (the real reaper looks every minute).
                self._freed = True
            if record is not None:
                self.workers.heartbeat(self.workers.agents[cloud_id])
        notices, self._notices[:] = list(self._notices), []
        for notice in notices:
            self._interruptions += 1
            heapq.heappush(self._deaths, (notice.interrupt_at, next(self._seq), notice.cloud_id))
            if self.policy.handles_interruptions:
                # EventBridge's warning reaches the interruptions service; the agent's own
                # metadata watcher sees it too and, told to stop, checkpoints first.
                on_interruption_notice(self.ctx, notice.cloud_id, NoticeKind.INTERRUPTION)
                noticed = self.workers.agents.get(notice.cloud_id)
                if noticed is not None:
                    self.workers.heartbeat(noticed, notice=True, checkpoint=True)
        while self._deaths and self._deaths[0][0] <= now:
            _, _, cloud_id = heapq.heappop(self._deaths)
            self.workers.kill(cloud_id, now)
            record = self.store.instance_by_cloud_id(cloud_id)
            if record is not None and record.is_live:
                self._vanished.add(cloud_id)

    def _launched(self, instance_id: str) -> None:
        record = self.store.get_instance(instance_id)
        if record is None or record.cloud_id is None:
            return
        offering = record.offering
        # A cloud id seen before is a stopped instance started again: the warm start model.
        warm = record.cloud_id in self._launched_offerings
        self._launched_offerings[record.cloud_id] = (offering.slots, offering.hourly_price)
        if not offering.is_spot:
            self._on_demand.add(record.cloud_id)
            pool = self.policy.pools.get(record.pool)
            if pool is not None and pool.move_fallback_to_spot and is_fallback(pool, offering):
                self._fallback_agents.add(record.cloud_id)
        boot = self.sim.warm_start if warm else self.sim.boot
        startup = boot.mean - boot.pending + self._startup_rng.uniform(-boot.jitter, boot.jitter)
        self._startup_draws.append(startup)
        at = (record.launched_at or self.clock.now()) + boot.pending + max(startup, 0.0)
        heapq.heappush(self._boots, (at, next(self._seq), record.cloud_id))

    # ---- messages and timers ----------------------------------------------------------
    def _pump(self) -> None:
        for _ in range(10_000):
            schedule = self.queue.receive(QueueName.SCHEDULE, 1 << 30, 600.0)
            launches = self.queue.receive(QueueName.SCALE_UP, 1 << 30, 600.0)
            if not schedule and not launches:
                return
            for received in launches:
                self.queue.delete(QueueName.SCALE_UP, received.receipt)
                command = parse(received.message)
                outcome = dispatch(self.ctx, command)
                if isinstance(command, LaunchInstance) and outcome == LaunchOutcome.LAUNCHED:
                    self._launched(command.instance_id)
            if schedule:
                # One pass per batch, as the schedule function handles an SQS batch.
                for received in schedule:
                    self.queue.delete(QueueName.SCHEDULE, received.receipt)
                self._schedule()
        raise RuntimeError("the queues never went quiet")

    def _schedule(self) -> None:
        report = run_schedule_pass(self.ctx)
        touched: dict[str, None] = {}
        for trial_id in report.assigned:
            trial = self.store.get_trial(trial_id)
            if trial is not None and trial.placement is not None:
                touched.update(dict.fromkeys(trial.placement.instance_ids))
        for record_id in touched:
            found = self.workers.agents.get(self.workers.by_record.get(record_id, ""))
            if found is not None:
                self.workers.heartbeat(found)

    def _grid_after(self, t: float) -> float:
        return START + ((t - START) // TICK_S + 1) * TICK_S

    def _on_grid(self, now: float) -> bool:
        return (now - START) % TICK_S == 0

    def _schedule_wanted(self) -> bool:
        return bool(
            self.store.trials(states={TrialState.PENDING})
            or self.store.instances(states={InstanceState.QUEUED})
        )

    def _reap_at(self, now: float) -> float | None:
        found = self.store.instances(states=IDLE_OR_DRAINING)
        if any(i.state is InstanceState.DRAINING for i in found):
            return self._grid_after(now)
        movable: list[float] = []
        if self._consolidating or self._fallback_alive():
            if self._freed:
                return self._grid_after(now)
            found_movable = self.workers.next_movable(self._last_reap)
            movable = [] if found_movable is None else [found_movable]
        # An agent already past its deadline at the last pass was kept for a reason (the
        # planner counts on it, min_instances): it is looked at again with the next one.
        deadlines = [
            d
            for i in found
            if (pool := self.policy.pools.get(i.pool)) is not None
            and (d := self.policy.reap_deadline(pool, i)) is not None
            and d >= self._last_reap
        ] + movable
        deadlines += self._stopped_deadlines()
        return self._grid_after(max(min(deadlines), now)) if deadlines else None

    def _stopped_deadlines(self) -> list[float]:
        """When stopped instances of the warm pools pass max_stopped_period (the reaper
        terminates them)."""
        out = []
        for record in self.store.instances(states={InstanceState.STOPPED}):
            pool = self.policy.pools.get(record.pool)
            if pool is not None and record.stopped_at is not None:
                due = record.stopped_at + pool.max_stopped_s
                if due >= self._last_reap:
                    out.append(due)
        return out

    def _next_ticks(self, now: float) -> list[float | None]:
        schedule = self._grid_after(now) if self._schedule_wanted() else None
        reconcile = self._grid_after(now) if self._vanished else None
        return [schedule, self._reap_at(now), reconcile]

    def _timers(self, now: float) -> None:
        if not self._on_grid(now):
            return
        if self._schedule_wanted():
            self._schedule()
        if self._vanished:
            for agent in self.workers.alive():
                self.workers.heartbeat(agent)
            run_reconcile(self.ctx)
            self._vanished = {
                c
                for c in self._vanished
                if (r := self.store.instance_by_cloud_id(c)) is not None and r.is_live
            }
            self._sweep()
        reap_at = self._reap_at(now - TICK_S)
        if reap_at is not None and reap_at <= now:
            for record in self.store.instances(states=IDLE_OR_DRAINING):
                idle = self.workers.agents.get(self.workers.by_record.get(record.id, ""))
                if idle is not None:
                    self.workers.heartbeat(idle)
            if self._consolidating or self._fallback_alive():
                self._report_checkpoints()
            self._keep_alive(now)
            self._freed = False
            report = run_idle_reap(self.ctx)
            self._last_reap = now
            for record_id in [*report.terminated, *report.stopped, *report.lost]:
                self.workers.kill(self.workers.by_record.get(record_id, ""), now)
            for record_id in report.consolidated:
                # Its next heartbeat (within 30 s on a real agent) says stop: the trials
                # checkpoint on SIGTERM, are requeued and land on the free GPUs.
                moved = self.workers.agents.get(self.workers.by_record.get(record_id, ""))
                if moved is not None:
                    self.workers.heartbeat(moved)
            self.workers.forget_dead()

    def _fallback_alive(self) -> bool:
        """Whether an on-demand fallback agent that may move back to spot is still up (or
        booting); the ones gone are forgotten."""
        for cloud_id in list(self._fallback_agents):
            agent = self.workers.agents.get(cloud_id)
            found = self.cloud.get(cloud_id)
            if (agent is not None and not agent.alive) or found is None or found.state.is_gone:
                self._fallback_agents.discard(cloud_id)
        return bool(self._fallback_agents)

    def _keep_alive(self, now: float) -> None:
        """Every live agent beats every 5 s, and the reaper declares lost one silent past
        the heartbeat timeout: the busy agents nothing made beat for that long beat now (a
        real one would have many times over)."""
        stale = now - self.ctx.settings.reconcile.heartbeat_timeout_s / 2
        agents = {a.agent_id: a for a in self.workers.alive() if a.agent_id is not None}
        beats = self.store.heartbeats(list(agents))
        for agent_id, agent in agents.items():
            beat = beats.get(agent_id)
            if beat is None or beat.at < stale:
                self.workers.heartbeat(agent)

    def _report_checkpoints(self) -> None:
        """Busy agents with free GPUs heartbeat (a real agent does every 30 s), so the reaper
        knows which of their trials have checkpointed. The others cannot be emptied by a
        move, or would not take one: their checkpoints do not matter to this pass."""
        for record in self.store.instances(states={InstanceState.BUSY}):
            if record.free_slots > 0 or not record.offering.is_spot:
                agent = self.workers.agents.get(self.workers.by_record.get(record.id, ""))
                if agent is not None:
                    self.workers.heartbeat(agent)

    def _sweep(self) -> None:
        """Agents whose record Corral ended (reconcile terminated it) stop with it."""
        now = self.clock.now()
        for agent in self.workers.alive():
            record = self.store.instance_by_cloud_id(agent.cloud_id)
            if record is None or not record.is_live:
                self.workers.kill(agent.cloud_id, now)
        self.workers.forget_dead()
