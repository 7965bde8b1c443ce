"""The agent protocol on the control-plane side: register, heartbeat, trial status, logs.

The caller (the API handler) has already verified the agent's identity document and passes
the cloud id it proves; every call is checked against the record it names, so an agent can
only ever act on its own record and the trials placed on it (``placed_here``). Proof of
identity is not enough: an instance's credentials outlive it, so every write is also
fenced (``corral.domain.agent_fence``): refused from an instance that is not IDLE, BUSY,
DRAINING or STOPPING, and about a trial that has ended, before anything is written. Refusals are the
domain's (``corral.domain.errors``); the API maps them to HTTP statuses.

Check, then write: the checks read the records by id (consistent reads), so a write that
starts after a fence was committed is refused. A status report commits its trial
conditionally on the version it checked, and every move that fences an instance holding a
trial (lost, terminated) writes that trial in the same commit, so a report racing the fence
loses and is checked again. Log lines and metric points are not conditional writes: one
that passed its checks just before the fence lands, as if it had arrived just before (it
comes from the live agent that ran the trial); none passes after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

from corral.domain.agent_fence import check_instance, check_late_lines, check_trial
from corral.domain.backoff import on_boot_failure, on_registration
from corral.domain.errors import (
    ConflictError,
    Ended,
    Forbidden,
    NotFoundError,
    RetryLater,
    ShutDown,
    Unhealthy,
)
from corral.domain.instance import Instance, InstanceState
from corral.domain.records import Event, EventKind, Heartbeat, LogLine, TrialReport
from corral.domain.trial import HOLDS_GPUS, Trial, TrialState
from corral.ports.store import commit_one, retry_on_conflict
from corral.protocol.agent import (
    AgentTrialState,
    HeartbeatRequest,
    HeartbeatResponse,
    LogBatch,
    RegisterRequest,
    RegisterResponse,
    TrialStatus,
)
from corral.services.shared.assignment_spec import build_assignment
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.instance_removal import reporting, terminate, wake_scheduler
from corral.services.shared.service_context import Context
from corral.services.shared.trial_release import move_off_gpus, requeue
from corral.services.trial_deadlines import settle_trial
from corral.services.trial_metrics import store_metrics


def register(ctx: Context, request: RegisterRequest, proven_cloud_id: str) -> RegisterResponse:
    if request.cloud_id != proven_cloud_id:
        raise Forbidden("the identity document is for another instance")
    now = ctx.clock.now()

    def step() -> RegisterResponse:
        record = _record_for(ctx, request)  # adopting a record may lose a race too
        if record.state is InstanceState.REQUESTED and record.is_warm_start:
            # The start went through but its answer was not recorded (scale-up died or lost
            # its write): the agent booting on that very instance is the proof.
            record = replace(
                record.transition(
                    InstanceState.ALLOCATED, now, "started again (seen at registration)"
                ),
                launched_at=record.requested_at or now,
            )
        if record.state in (InstanceState.IDLE, InstanceState.BUSY):
            updated = replace(record, address=request.private_ip or record.address)
        elif record.state is InstanceState.ALLOCATED:
            if request.unhealthy_reason or len(request.gpus) < record.slots:
                _reject_unhealthy(ctx, record, len(request.gpus), request.unhealthy_reason)
            updated = replace(
                record.transition(
                    InstanceState.IDLE, now, f"agent registered {len(request.gpus)} GPU(s)"
                ),
                registered_at=record.registered_at or now,
                address=request.private_ip,
            )
        else:
            # LOST included: its trials were requeued and it is being terminated (its agent
            # fenced them already); a process that comes back there must not take work.
            raise ShutDown(
                f"instance {request.cloud_id} is {record.state.value}: its writes are refused"
            )
        state = ctx.store.pool_state(record.pool)
        fresh = on_registration(state)
        ctx.store.commit([updated] if fresh is state else [updated, fresh])
        if updated.state is not record.state:
            registered = f"{request.cloud_id} with {len(request.gpus)} GPU(s)"
            log_instance_event(ctx, record, EventKind.AGENT_REGISTERED, registered, now)
            wake_scheduler(ctx, f"{record.id} registered")
        return RegisterResponse(
            agent_id=record.id,
            heartbeat_interval_s=ctx.settings.heartbeat_interval_s,
            dead_man_switch_s=ctx.settings.dead_man_switch_s,
            fence_after_s=ctx.settings.fence_after_s,
            trial_role_arn=ctx.trial_role_arn,
        )

    try:
        return retry_on_conflict(step)
    except ConflictError as exc:
        # 503, not 409: an agent told 409 at registration shuts its instance down.
        raise RetryLater(f"the record of {request.cloud_id} kept changing; retry") from exc


def _record_for(ctx: Context, request: RegisterRequest) -> Instance:
    record = ctx.store.instance_by_cloud_id(request.cloud_id)
    if record is not None:
        return record
    # The launch crashed before it recorded the cloud id: adopt by the record tag, as
    # reconcile would, so the agent need not wait for the next reconcile pass.
    if request.record_id:
        pending = ctx.store.get_instance(request.record_id)
        if (
            pending is not None
            and pending.state is InstanceState.REQUESTED
            and not pending.cloud_id
        ):
            _check_launched_for(ctx, request.cloud_id, pending.id)
            now = ctx.clock.now()
            adopted = replace(
                pending.transition(InstanceState.ALLOCATED, now, "adopted at registration"),
                cloud_id=request.cloud_id,
                launched_at=pending.requested_at or now,
            )
            return commit_one(ctx.store, adopted)  # a lost race: ConflictError, retry
    raise NotFoundError(f"{request.cloud_id} is not an instance Corral launched")


def _check_launched_for(ctx: Context, cloud_id: str, record_id: str) -> None:
    """The record id comes from the agent; the cloud's record tag is the proof. Without
    this check any instance able to prove its own identity (one carrying the agent role)
    could claim a record whose launch crashed before recording its cloud id. A listing
    costs one call, and only after such a crash."""
    listed = next((c for c in ctx.cloud.list_owned() if c.cloud_id == cloud_id), None)
    if listed is None:
        # A fresh launch may be missing from the listing for a while (EC2 is eventually
        # consistent); the agent retries, and reconcile adopts by tag meanwhile.
        raise RetryLater(f"{cloud_id} is not in the cloud's listing of Corral's instances yet")
    if listed.record_id != record_id:
        raise Forbidden(
            f"{cloud_id} was launched for {listed.record_id or 'no record'}, not {record_id}"
        )


def _reject_unhealthy(ctx: Context, record: Instance, found: int, agent_says: str | None) -> None:
    """Never register a zero-GPU agent (Determined launched, idled and reaped those in a
    loop): terminate it and count it against the pool's breaker."""
    reason = agent_says or (
        f"agent found {found} GPU(s), {record.offering.instance_type} has {record.slots}"
    )
    state, opened = on_boot_failure(
        ctx.store.pool_state(record.pool), ctx.clock.now(), ctx.settings.reconcile.breaker_threshold
    )
    with contextlib.suppress(ConflictError):
        ctx.store.commit([state])
    if opened:
        ctx.store.append_events(
            [Event(ctx.clock.now(), EventKind.BREAKER_OPEN, opened, pool=record.pool)]
        )
    if record.state is not InstanceState.TERMINATING:  # a repeated register: already going
        terminating = record.transition(InstanceState.TERMINATING, ctx.clock.now(), reason)
        terminate(ctx, terminating, EventKind.INSTANCE_TERMINATING)
    wake_scheduler(ctx, f"{record.id} was refused")  # its demand still waits
    raise Unhealthy(reason)


def _own_record(ctx: Context, agent_id: str, proven_cloud_id: str) -> Instance:
    record = ctx.store.get_instance(agent_id)
    if record is None or record.cloud_id != proven_cloud_id:
        raise Forbidden(f"agent {agent_id} does not belong to {proven_cloud_id}")
    return record


def _live_record(ctx: Context, agent_id: str, proven_cloud_id: str) -> Instance:
    """The agent's own record, if its agent may still write (``ShutDown`` otherwise)."""
    record = _own_record(ctx, agent_id, proven_cloud_id)
    check_instance(record)
    return record


def placed_here(
    ctx: Context, agent_id: str, proven_cloud_id: str, trial_id: str, *, ended_ok: bool = False
) -> tuple[Instance, Trial]:
    """The agent's record and a trial it may act on: one placed on it at some point
    (``ran_on``) that has not ended. A trial that has since moved on still passes, because
    the agent may learn of the move only from the heartbeat reply (its run's last log lines
    are real); a status about it is ignored (``report_trial_status``). The record is checked
    first, so another instance's agent learns nothing about trials (Forbidden before any
    NotFoundError), then the fence (``ShutDown``), then the trial (``Ended`` last: only the
    agents it ran on learn that it ended; ``ended_ok`` leaves that check to the caller)."""
    record = _live_record(ctx, agent_id, proven_cloud_id)
    trial = ctx.store.get_trial(trial_id)
    if trial is None:
        raise NotFoundError(f"no trial {trial_id}")
    if record.id not in trial.ran_on:
        raise Forbidden(f"trial {trial_id} was never placed on {agent_id}")
    if not ended_ok:
        check_trial(trial)
    return record, trial


def heartbeat(
    ctx: Context, agent_id: str, proven_cloud_id: str, request: HeartbeatRequest
) -> HeartbeatResponse:
    record = _live_record(ctx, agent_id, proven_cloud_id)  # nothing is written otherwise
    now = ctx.clock.now()
    ctx.store.put_heartbeat(
        Heartbeat(
            instance_id=record.id,
            at=now,
            trials=tuple(
                TrialReport(t.trial_id, t.state.value, t.exit_code, t.latest_checkpoint)
                for t in request.trials
            ),
            gpu_utilization=tuple(m.utilization_pct for m in request.gpu_metrics),
            gpu_memory_used_mib=tuple(m.memory_used_mib for m in request.gpu_metrics),
            draining=request.draining,
        )
    )
    if record.interruption_notice_at is None and (request.interruption_notice or request.draining):
        from corral.services.interruptions import NoticeKind, on_interruption_notice

        # A preemption notice requeues the trials at once; an agent draining on its own
        # (SIGTERM, a rebalance recommendation) only stops new work from landing there.
        kind = NoticeKind.INTERRUPTION if request.interruption_notice else NoticeKind.REBALANCE
        on_interruption_notice(ctx, proven_cloud_id, kind)
    # Metrics first: observations on their own records, never a trial's version.
    retry = store_metrics(ctx, record, request.metrics) if request.metrics else []
    for status in request.trials:
        # A heartbeat lists what runs there; a trial never placed here, or one that has
        # ended, is only told to stop (and a finished run is acknowledged, so forgotten).
        with contextlib.suppress(Forbidden, NotFoundError, Ended):
            report_trial_status(ctx, agent_id, proven_cloud_id, status)
    record = _own_record(ctx, agent_id, proven_cloud_id)
    if _settle_unreported(ctx, record, {t.trial_id for t in request.trials}):
        record = _own_record(ctx, agent_id, proven_cloud_id)
    orders = _orders(ctx, record, request.trials)
    return orders.model_copy(update={"metrics_retry": retry}) if retry else orders


def _settle_unreported(ctx: Context, record: Instance, known: set[str]) -> bool:
    """Trials on the record that the agent does not report. An agent reports every trial
    it holds until the control plane has acknowledged its end, so absence means the trial
    does not run there:
    - STOPPING, and no agent of it reports it: it was killed before it started (or the
      agent never took it); nothing is left to stop, so cancel it now;
    - RUNNING on its rank-0 agent: the agent lost it (restarted, its container gone):
      requeue it to resume from its checkpoint. Other ranks finish before rank 0 and
      are forgotten once their exit is acknowledged, so only rank 0's absence counts.
    ASSIGNED trials are simply sent again (``_orders``); their deadline covers the rest."""
    settled = False
    for trial_id in record.trial_ids:
        if trial_id in known:
            continue
        trial = ctx.store.get_trial(trial_id)
        if trial is None or trial.placement is None:
            continue
        if trial.state is TrialState.STOPPING:
            others = [i for i in trial.placement.instance_ids if i != record.id]
            beats = ctx.store.heartbeats(others) if others else {}
            if any(any(r.trial_id == trial_id for r in b.trials) for b in beats.values()):
                continue  # another agent of the gang still runs it: its report ends it
            reason = f"stopped before {record.id} started it"
            settled |= settle_trial(ctx, trial, TrialState.CANCELLED, reason)
        elif trial.state is TrialState.RUNNING and trial.placement.instance_ids[0] == record.id:
            reason = f"{record.id} no longer runs it (agent restarted?)"
            settled |= settle_trial(ctx, trial, TrialState.PENDING, reason)
        elif trial.state is TrialState.PREEMPTED:
            # It stopped here; requeued once no other agent of it still runs it.
            others = [i for i in trial.placement.instance_ids if i != record.id]
            reason = f"stopped on {record.id}"
            settled |= settle_trial(
                ctx,
                trial,
                TrialState.PENDING,
                reason,
                still_running=reporting(ctx, trial_id, others),
            )
    return settled


def _orders(ctx: Context, record: Instance, reported: Sequence[TrialStatus]) -> HeartbeatResponse:
    known = {t.trial_id for t in reported}
    running_there = {
        t.trial_id
        for t in reported
        if t.state in (AgentTrialState.STARTING, AgentTrialState.RUNNING)
    }
    start = []
    mine = set(record.trial_ids)
    stopping: set[str] = set()
    for trial_id in record.trial_ids:
        trial = ctx.store.get_trial(trial_id)
        if trial is None:
            continue
        if trial.state in (TrialState.STOPPING, TrialState.PREEMPTED):
            stopping.add(trial_id)
        elif trial.state is TrialState.ASSIGNED and trial_id not in known:
            assignment = build_assignment(ctx, trial, record.id)
            if assignment is not None:
                start.append(assignment)
    stop = sorted((running_there - mine) | (stopping & running_there))
    return HeartbeatResponse(start=start, stop=stop, drain=record.state is InstanceState.DRAINING)


def report_trial_status(
    ctx: Context, agent_id: str, proven_cloud_id: str, status: TrialStatus
) -> Trial | None:
    """Apply what the agent saw happen to a trial placed on it (``placed_here``: Forbidden,
    NotFoundError, ShutDown or Ended otherwise). Reports about trials that have moved on
    since are ignored (the heartbeat reply tells the agent to stop them)."""

    def step() -> Trial | None:
        record, trial = placed_here(ctx, agent_id, proven_cloud_id, status.trial_id)
        if trial.placement is None or record.id not in trial.placement.instance_ids:
            return None
        new_checkpoint = bool(status.latest_checkpoint) and (
            status.latest_checkpoint != trial.latest_checkpoint
        )
        if new_checkpoint:
            trial = replace(trial, latest_checkpoint=status.latest_checkpoint)
        records = _apply_status(ctx, trial, status, record, new_checkpoint)
        if not records:
            return trial
        stored = ctx.store.commit(records)
        moved = next(r for r in stored if isinstance(r, Trial))
        if moved.state is trial.state:
            return moved  # a new checkpoint, not a transition: the event log records those
        if moved.state is not TrialState.RUNNING:
            wake_scheduler(ctx, f"{moved.id} left its GPUs")
        ctx.store.append_events(
            [
                Event(
                    ctx.clock.now(),
                    EventKind.TRIAL_STATE,
                    f"{moved.state.value}: {status.message or status.state.value}",
                    pool=moved.pool,
                    trial_id=moved.id,
                    experiment_id=moved.experiment_id,
                    instance_id=record.id,
                )
            ]
        )
        return moved

    try:
        return retry_on_conflict(step)
    except ConflictError as exc:
        # Never let the agent take an unapplied report for delivered: it forgets a trial
        # once its end is acknowledged, and the trial would stay RUNNING with nobody
        # reporting it.
        raise RetryLater(f"trial {status.trial_id} kept changing; report it again") from exc


def _apply_status(
    ctx: Context, trial: Trial, status: TrialStatus, record: Instance, new_checkpoint: bool
) -> list[Trial | Instance]:
    now = ctx.clock.now()
    agents = (
        {i: ctx.store.get_instance(i) for i in trial.placement.instance_ids}
        if trial.placement
        else {}
    )
    instances = {k: v for k, v in agents.items() if v is not None}
    state = status.state
    if state in (AgentTrialState.STARTING, AgentTrialState.RUNNING):
        # A gang runs once every rank runs it: until then it stays ASSIGNED, so a rank whose
        # heartbeat comes later is still sent its start (``_orders``).
        if (
            trial.state is TrialState.ASSIGNED
            and state is AgentTrialState.RUNNING
            and _every_other_rank_reports(ctx, trial, record.id)
        ):
            return [trial.transition(TrialState.RUNNING, now, f"running on {record.id}")]
        return [trial] if new_checkpoint else []
    if trial.state not in HOLDS_GPUS:
        return []
    others = [i for i in instances if i != record.id]
    if trial.state is TrialState.STOPPING:
        moved, freed = move_off_gpus(trial, TrialState.CANCELLED, instances, now, "stopped")
    elif trial.state is TrialState.PREEMPTED:
        moved, freed = _preempted_ended(ctx, trial, status, record, instances, others)
    elif state is AgentTrialState.EXITED and status.exit_code == 0:
        is_rank0 = trial.placement is not None and trial.placement.instance_ids[0] == record.id
        if not is_rank0:
            return []  # the trial is done when rank 0 is done
        if trial.state is TrialState.ASSIGNED:
            trial = trial.transition(TrialState.RUNNING, now, "started")
        moved, freed = move_off_gpus(trial, TrialState.COMPLETED, instances, now, "exit code 0")
        moved = replace(moved, exit_code=0)
    elif state is AgentTrialState.EXITED:
        moved, freed = _user_error(trial, instances, now, status.exit_code)
    else:  # PREEMPTED, or STOPPED without being asked: infrastructure, not the user's fault
        running = reporting(ctx, trial.id, others)  # other ranks still stopping it
        reason = f"{state.value} on {record.id}"
        moved, freed = requeue(trial, instances, now, reason, still_running=running)
    # Where this run's output ends: log readers follow up to it (corral command run).
    return [replace(moved, log_end_seq=status.log_end_seq), *freed]


def _preempted_ended(
    ctx: Context,
    trial: Trial,
    status: TrialStatus,
    record: Instance,
    instances: dict[str, Instance],
    others: list[str],
) -> tuple[Trial, list[Instance]]:
    """An agent of a PREEMPTED trial reports it ended there. A whole trial on this one
    agent that exited 0 finished in time; otherwise it is requeued once every agent still
    holding it has stopped it (the others keep it PREEMPTED on their GPUs till then)."""
    now = ctx.clock.now()
    whole_here = (
        trial.placement is not None
        and trial.placement.instance_ids == (record.id,)
        and trial.placement.slots == trial.slots
    )
    if whole_here and status.state is AgentTrialState.EXITED and status.exit_code == 0:
        moved, freed = move_off_gpus(trial, TrialState.COMPLETED, instances, now, "exit code 0")
        return replace(moved, exit_code=0), freed
    running = reporting(ctx, trial.id, others)
    reason = f"{status.state.value} on {record.id}"
    return requeue(trial, instances, now, reason, still_running=running)


def _every_other_rank_reports(ctx: Context, trial: Trial, reporting_id: str) -> bool:
    """Whether every agent of the trial's placement but ``reporting_id`` has it in its
    latest heartbeat (an agent reports each trial it holds, from its start)."""
    placed = trial.placement.instance_ids if trial.placement else ()
    others = [i for i in placed if i != reporting_id]
    return reporting(ctx, trial.id, others) == frozenset(others)


def _user_error(
    trial: Trial, instances: dict[str, Instance], now: float, exit_code: int | None
) -> tuple[Trial, list[Instance]]:
    """A non-zero exit is the user's: run again from the checkpoint while restarts last."""
    retry = trial.restarts < trial.max_restarts
    target = TrialState.PENDING if retry else TrialState.FAILED
    moved, freed = move_off_gpus(trial, target, instances, now, f"exit code {exit_code}")
    return replace(moved, restarts=moved.restarts + int(retry), exit_code=exit_code), freed


def append_logs(
    ctx: Context, agent_id: str, proven_cloud_id: str, trial_id: str, batch: LogBatch
) -> int:
    _, trial = placed_here(ctx, agent_id, proven_cloud_id, trial_id, ended_ok=True)
    if batch.lines:
        # The terminal status may overtake the last batch: lines up to the end it announced
        # are still taken; a batch reaching beyond it is refused whole.
        check_late_lines(trial, max(line.seq for line in batch.lines))
    ctx.store.append_logs(
        [LogLine(trial_id, line.seq, line.at, line.line, line.stream) for line in batch.lines]
    )
    return len(batch.lines)
