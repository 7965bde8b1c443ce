"""Simulated agents and the jobs they run, driven through the real agent services.

An agent registers when its instance is running and its agent has started, then talks to the
control plane only through ``services.agents`` (register, heartbeat, report_trial_status),
as the agent runtime does. A trial runs for its remaining work; it checkpoints every
``checkpoint_interval_s`` from the start of each run, and, when told to stop (Corral turns an
interruption notice into a stop), checkpoints on the way out. Work since the last checkpoint
is lost when an instance disappears under a running trial.

Each agent keeps an ``AgentLog`` (registration, GPUs in use over time, whether it was
launched for a gang) from which the metrics split idle GPU-hours by cause.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from dataclasses import dataclass, field

from corral.domain.consolidation import MIN_RUN_S
from corral.domain.errors import ConflictError, Refused
from corral.protocol.agent import (
    AgentTrialState,
    GpuInfo,
    HeartbeatRequest,
    Identity,
    IdentityKind,
    RegisterRequest,
    TrialStatus,
)
from corral.services import agents as agent_service
from corral.services.shared.service_context import Context
from corral.sim.trace import Job


@dataclass(slots=True)
class JobRun:
    job: Job
    trial_id: str
    checkpoint_interval_s: float
    done_s: float = 0.0  # work saved in checkpoints (or finished)
    run_start: float | None = None
    run_token: int = 0
    agents: tuple[str, ...] = ()  # cloud ids running the current run, rank 0 first
    first_start: float | None = None
    completed_at: float | None = None
    used_gpu_s: float = 0.0  # GPU time held while running, lost work and restarts included
    lost_gpu_s: float = 0.0
    restart_gpu_s: float = 0.0  # GPU time spent resuming (loading a checkpoint), not working
    held: dict[str, int] = field(default_factory=dict)  # cloud id -> GPUs of this run there
    overhead_s: float = 0.0  # the current run's resume time, before its work goes on

    def progress(self, now: float) -> float:
        """Work of the current run so far (after its resume time)."""
        if self.run_start is None:
            return 0.0
        return max(now - self.run_start - self.overhead_s, 0.0)

    def checkpointed(self, now: float) -> float:
        """Work saved in checkpoints by ``now`` (periodic ones of the current run included)."""
        ran = self.progress(now)
        return min(self.done_s + ran - ran % self.checkpoint_interval_s, self.job.duration_s)

    def end_run(self, now: float, checkpoint_now: bool) -> None:
        """The current run stops at ``now``; keep what was checkpointed."""
        if self.run_start is None:
            return
        ran = now - self.run_start
        work = self.progress(now)
        saved = work if checkpoint_now else work - work % self.checkpoint_interval_s
        saved = min(saved, self.job.duration_s - self.done_s)
        self.used_gpu_s += self.job.gpus * ran
        self.restart_gpu_s += self.job.gpus * min(ran, self.overhead_s)
        self.lost_gpu_s += self.job.gpus * max(work - saved, 0.0)
        self.done_s += saved
        self.run_start = None
        self.run_token += 1
        self.agents = ()


@dataclass
class AgentLog:
    """What one agent did with its GPUs, for the idle breakdown."""

    gpus: int
    registered_at: float
    for_gang: bool  # launched for a trial larger than the instance (a gang member)
    changes: list[tuple[float, int]] = field(default_factory=list)  # (time, +/- GPUs in use)


@dataclass
class SimAgent:
    cloud_id: str
    gpus: int
    agent_id: str | None = None
    running: set[str] = field(default_factory=set)
    alive: bool = True


@dataclass
class Workers:
    """Every simulated agent and job of one run."""

    ctx: Context
    # GPU time a resumed run spends before its work goes on (simulation.restart_overhead).
    restart_overhead_s: float = 0.0
    agents: dict[str, SimAgent] = field(default_factory=dict)  # by cloud id
    by_record: dict[str, str] = field(default_factory=dict)  # record id -> cloud id
    jobs: dict[str, JobRun] = field(default_factory=dict)  # by trial id
    completions: list[tuple[float, int, str, int]] = field(default_factory=list)
    # One log per life of an instance (a warm pool starts a stopped one again), by cloud id.
    logs: dict[str, list[AgentLog]] = field(default_factory=dict)
    # (time, seq, trial id, run token): when a run may first be moved by consolidation (it
    # has a checkpoint and has run MIN_RUN_S), so the engine runs the reaper then.
    movable: list[tuple[float, int, str, int]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    # ---- agents ---------------------------------------------------------------------
    def register(self, cloud_id: str, record_id: str | None, itype: str, zone: str) -> None:
        record = self.ctx.store.instance_by_cloud_id(cloud_id)
        gpus = record.slots if record is not None else 0
        agent = SimAgent(cloud_id, gpus)
        self.agents[cloud_id] = agent
        request = RegisterRequest(
            cloud_id=cloud_id,
            record_id=record_id,
            identity=Identity(kind=IdentityKind.DEV, document="sim"),
            instance_type=itype,
            zone=zone,
            gpus=[GpuInfo(index=i, uuid=f"GPU-{i}", name="sim", memory_mib=0) for i in range(gpus)],
        )
        try:
            agent.agent_id = agent_service.register(self.ctx, request, cloud_id).agent_id
        except (Refused, ConflictError):
            agent.alive = False  # told to shut down (its record moved on meanwhile)
            return
        self.by_record[agent.agent_id] = cloud_id
        planned = record.planned_for if record is not None else ()
        gang = any(t in self.jobs and self.jobs[t].job.gpus > gpus for t, _ in planned)
        self.logs.setdefault(cloud_id, []).append(AgentLog(gpus, self.ctx.clock.now(), gang))

    def heartbeat(self, agent: SimAgent, *, notice: bool = False, checkpoint: bool = True) -> None:
        """One heartbeat: report what runs, start what the reply assigns, stop what it
        says to stop (checkpointing first when ``checkpoint``)."""
        if not agent.alive or agent.agent_id is None:
            return
        now = self.ctx.clock.now()
        statuses = [
            TrialStatus(
                trial_id=t,
                state=AgentTrialState.RUNNING,
                latest_checkpoint=self._checkpoint(t, now),
            )
            for t in sorted(agent.running)
        ]
        reply = agent_service.heartbeat(
            self.ctx,
            agent.agent_id,
            agent.cloud_id,
            HeartbeatRequest(trials=statuses, interruption_notice=notice),
        )
        peers: dict[str, None] = {}
        for trial_id in reply.stop:
            job = self.jobs.get(trial_id)
            if job is not None and agent.cloud_id in job.agents:
                peers.update(dict.fromkeys(c for c in job.agents if c != agent.cloud_id))
                self._stop_run(job, now, checkpoint)
            agent.running.discard(trial_id)
            # The real agent reports a run's end the moment it stops (it does not wait for
            # its next heartbeat): a preempted trial is requeued on that report.
            stopped = TrialStatus(trial_id=trial_id, state=AgentTrialState.STOPPED)
            with contextlib.suppress(Refused, ConflictError):
                agent_service.report_trial_status(self.ctx, agent.agent_id, agent.cloud_id, stopped)
        started = [a.trial_id for a in reply.start]
        for trial_id in started:
            agent.running.add(trial_id)
            self._join_run(trial_id, agent, now)
        for trial_id in started:
            status = TrialStatus(trial_id=trial_id, state=AgentTrialState.RUNNING)
            agent_service.report_trial_status(self.ctx, agent.agent_id, agent.cloud_id, status)
        # The other ranks of a stopped gang stop with it (torch.distributed ends every rank
        # when one leaves) and their agents say so in their next heartbeat, seconds later.
        # Without it the trial stayed PREEMPTED on their GPUs until some unrelated event
        # made them heartbeat, and the planner held idle agents for it meanwhile.
        for cloud_id in peers:
            peer = self.agents.get(cloud_id)
            if peer is not None:
                self.heartbeat(peer)

    def kill(self, cloud_id: str, now: float) -> None:
        """The instance is gone: its runs end with what they had checkpointed."""
        agent = self.agents.get(cloud_id)
        if agent is None or not agent.alive:
            return
        agent.alive = False
        for trial_id in list(agent.running):
            job = self.jobs.get(trial_id)
            if job is not None and cloud_id in job.agents:
                self._stop_run(job, now, checkpoint=False)
        agent.running.clear()

    def alive(self) -> list[SimAgent]:
        return [a for a in self.agents.values() if a.alive]

    def forget_dead(self) -> None:
        for cloud_id in [c for c, a in self.agents.items() if not a.alive]:
            agent = self.agents.pop(cloud_id)
            if agent.agent_id is not None:
                self.by_record.pop(agent.agent_id, None)

    # ---- runs -----------------------------------------------------------------------
    def _checkpoint(self, trial_id: str, now: float) -> str | None:
        """The reference of the trial's latest checkpoint, as its agent reports it."""
        job = self.jobs.get(trial_id)
        if job is None:
            return None
        saved = job.checkpointed(now)
        return f"sim://{trial_id}/{saved:.0f}" if saved > 0 else None

    def _join_run(self, trial_id: str, agent: SimAgent, now: float) -> None:
        job = self.jobs.get(trial_id)
        if job is None:
            return
        if job.run_start is None:
            job.run_start = now
            # A resumed run first loads its checkpoint (and restarts its framework).
            job.overhead_s = 0.0 if job.first_start is None else self.restart_overhead_s
            job.first_start = now if job.first_start is None else job.first_start
            job.run_token += 1
            finish = now + job.overhead_s + (job.job.duration_s - job.done_s)
            heapq.heappush(self.completions, (finish, next(self._seq), trial_id, job.run_token))
            first_checkpoint = (
                now if job.done_s > 0 else now + job.overhead_s + job.checkpoint_interval_s
            )
            movable_at = max(first_checkpoint, now + MIN_RUN_S)
            if movable_at < finish:
                heapq.heappush(self.movable, (movable_at, next(self._seq), trial_id, job.run_token))
        job.agents = (*job.agents, agent.cloud_id)
        gpus = self._gpus_on(trial_id, agent, job)
        job.held[agent.cloud_id] = gpus
        log = self._log(agent.cloud_id)
        if log is not None:
            log.changes.append((now, gpus))

    def _log(self, cloud_id: str) -> AgentLog | None:
        """The log of the instance's current life."""
        lives = self.logs.get(cloud_id)
        return lives[-1] if lives else None

    def _gpus_on(self, trial_id: str, agent: SimAgent, job: JobRun) -> int:
        """GPUs of the trial's placement on this agent (all of them on a single agent)."""
        trial = self.ctx.store.get_trial(trial_id)
        if trial is not None and trial.placement is not None:
            for instance_id, gpus in trial.placement.parts:
                if instance_id == agent.agent_id:
                    return len(gpus)
        return job.job.gpus

    def _release(self, job: JobRun, now: float) -> None:
        for cloud_id, gpus in job.held.items():
            log = self._log(cloud_id)
            if log is not None:
                log.changes.append((now, -gpus))
        job.held = {}

    def _stop_run(self, job: JobRun, now: float, checkpoint: bool) -> None:
        for cloud_id in job.agents:
            other = self.agents.get(cloud_id)
            if other is not None:
                other.running.discard(job.trial_id)
        self._release(job, now)
        job.end_run(now, checkpoint)

    def next_movable(self, after: float) -> float | None:
        """The first time after ``after`` that a run still going becomes movable."""
        while self.movable:
            at, _, trial_id, token = self.movable[0]
            if at > after and self.jobs[trial_id].run_token == token:
                return at
            heapq.heappop(self.movable)  # already looked at, or the run ended
        return None

    def next_completion(self) -> float | None:
        while self.completions:
            _, _, trial_id, token = self.completions[0]
            if self.jobs[trial_id].run_token == token:
                return self.completions[0][0]
            heapq.heappop(self.completions)  # a run that ended early
        return None

    def complete_due(self, now: float) -> int:
        """Report every run that finished by ``now`` (rank 0 reports the exit)."""
        done = 0
        while self.completions and self.completions[0][0] <= now:
            _, _, trial_id, token = heapq.heappop(self.completions)
            job = self.jobs[trial_id]
            if job.run_token != token or not job.agents:
                continue
            rank0 = self.agents[job.agents[0]]
            ran = now - (job.run_start or now)
            for cloud_id in job.agents:
                self.agents[cloud_id].running.discard(trial_id)
            self._release(job, now)
            job.used_gpu_s += job.job.gpus * ran
            job.restart_gpu_s += job.job.gpus * min(ran, job.overhead_s)
            job.done_s = job.job.duration_s
            job.completed_at = now
            job.run_start = None
            job.run_token += 1
            job.agents = ()
            assert rank0.agent_id is not None
            status = TrialStatus(trial_id=trial_id, state=AgentTrialState.EXITED, exit_code=0)
            agent_service.report_trial_status(self.ctx, rank0.agent_id, rank0.cloud_id, status)
            done += 1
        return done
