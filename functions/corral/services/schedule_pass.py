"""The schedule pass: place pending trials on free GPUs, then plan launches for what is left.

Runs on every schedule message and on a one-minute timer. Every write is conditional, so two
passes racing each other (a message and the timer) cannot both win: an assignment that loses
leaves the trial pending for the next pass, and the launch plan of a pool is committed
together with the pool's state record, so only one of two racing planners launches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from corral.domain.errors import ConflictError
from corral.domain.instance import LIVE_STATES, Instance, InstanceState, new_instance
from corral.domain.placement import Assignment, PlacementResult, place_trials
from corral.domain.planner import PlannedLaunch, PoolPlan
from corral.domain.records import Event, EventKind, PoolState
from corral.domain.trial import Trial, TrialState
from corral.ports.commands import LaunchInstance, send
from corral.services.fleet_gauges import FleetGauges, gauges_after_pass
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.service_context import Context
from corral.services.shared.spend import pool_month_to_date


@dataclass
class PassReport:
    assigned: list[str] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    undrained: list[str] = field(default_factory=list)
    conflicts: int = 0
    gauges: FleetGauges = field(default_factory=FleetGauges)


def plan_all(
    ctx: Context, pending: Sequence[Trial], live: Sequence[Instance]
) -> tuple[PlacementResult, dict[str, PoolPlan]]:
    """Placement and plans without writing anything (the reaper uses it to learn which
    idle agents the demand still counts on). ``pending`` may hold PREEMPTED trials too:
    they are planned for (their replacement boots while they checkpoint) but not placed."""
    result, plans, _ = _plan(ctx, pending, live)
    return result, plans


def _plan(
    ctx: Context, pending: Sequence[Trial], live: Sequence[Instance]
) -> tuple[PlacementResult, dict[str, PoolPlan], dict[str, PoolState]]:
    now = ctx.clock.now()
    result = place_trials([t for t in pending if t.state is TrialState.PENDING], live)
    demand = [*result.unplaced, *(t for t in pending if t.state is TrialState.PREEMPTED)]
    plans: dict[str, PoolPlan] = {}
    states: dict[str, PoolState] = {}
    for name, pool in ctx.pools.items():
        state = states[name] = ctx.store.pool_state(name)
        pool_live = [i for i in live if i.pool == name]
        plans[name] = ctx.policy.plan_pool(
            pool,
            [t for t in demand if t.pool == name],
            pool_live,
            state,
            now,
            leftover_free=result.leftover_free,
            month_to_date_usd=pool_month_to_date(state, pool_live, now, pool.disk_hourly_usd),
        )
    return result, plans, states


def run_schedule_pass(ctx: Context) -> PassReport:
    """Place what fits, then launch for the rest: the placement and the plans are the ones
    ``plan_all`` computes, applied here. A trial whose assignment loses its race was counted
    as placed by the plan, so it launches nothing this pass and is placed again next one."""
    report = PassReport()
    # PREEMPTED trials are still stopping where they ran (a spot notice, a lost gang member):
    # not placeable yet, but their replacement capacity is planned now.
    waiting = ctx.store.trials(states={TrialState.PENDING, TrialState.PREEMPTED})
    live = {i.id: i for i in ctx.store.instances(states=LIVE_STATES)}
    report.undrained = _take_back_drained(ctx, waiting, live)
    result, plans, states = _plan(ctx, waiting, list(live.values()))
    for assignment in result.assignments:
        if _assign(ctx, assignment, live):
            report.assigned.append(assignment.trial.id)
        else:
            report.conflicts += 1
    for name, plan in plans.items():
        pool_live = [i for i in live.values() if i.pool == name]
        _apply_plan(ctx, plan, states[name], pool_live, report)
        _update_pending_reasons(ctx, [t for t in result.unplaced if t.pool == name], plan)
    for inst in live.values():
        # A launch not yet attempted for a pool removed from the config: nothing will ever
        # plan or attempt it (corral.domain.retired_pools); a warm start goes back to the
        # warm pool, which the reaper then empties.
        if inst.pool not in ctx.pools and inst.state is InstanceState.QUEUED:
            _cancel(ctx, inst)
    assigned = frozenset(report.assigned)
    now = ctx.clock.now()
    report.gauges = gauges_after_pass(ctx.pools, waiting, assigned, live.values(), states, now)
    return report


def _take_back_drained(
    ctx: Context, pending: Sequence[Trial], live: dict[str, Instance]
) -> list[str]:
    """Agents drained for idleness that the pending demand counts on go back to IDLE now,
    so this pass places work on them: waiting for the reaper's next pass would keep the
    work waiting up to a timer period while a warm agent sits there (work submitted while
    the last run's agents drain). Agents draining for an interruption, or emptied by
    consolidation, never come back."""
    drained = [i for i in live.values() if i.drained_for_idleness]
    if not pending or not drained:
        return []
    _, plans = plan_all(ctx, pending, list(live.values()))
    reserved = {i for plan in plans.values() for i in plan.reserved}
    now = ctx.clock.now()
    taken: list[str] = []
    for inst in drained:
        if inst.id not in reserved:
            continue
        back = inst.transition(InstanceState.IDLE, now, "taken back for pending demand")
        try:
            (stored,) = ctx.store.commit([back])
        except ConflictError:
            continue  # the reaper terminated it meanwhile: the plan launches instead
        assert isinstance(stored, Instance)
        live[inst.id] = stored
        taken.append(inst.id)
        log_instance_event(ctx, stored, EventKind.AGENT_UNDRAINED, back.history[-1].reason, now)
    return taken


def _assign(ctx: Context, assignment: Assignment, live: dict[str, Instance]) -> bool:
    now = ctx.clock.now()
    trial = assignment.trial.assigned(assignment.placement, now)
    agents: list[Instance] = []
    for instance_id, gpus in assignment.placement.parts:
        inst = live[instance_id].with_allocation(trial.id, gpus)
        if inst.state is InstanceState.IDLE:
            inst = inst.transition(InstanceState.BUSY, now, f"assigned {trial.id}")
        agents.append(inst)
    try:
        stored = ctx.store.commit([trial, *agents])
    except ConflictError:
        for instance_id in assignment.placement.instance_ids:
            fresh = ctx.store.get_instance(instance_id)
            if fresh is not None:
                live[instance_id] = fresh
        return False
    for record in stored:
        if isinstance(record, Instance):
            live[record.id] = record
    ctx.store.append_events(
        [
            Event(
                now,
                EventKind.TRIAL_ASSIGNED,
                f"assigned to {', '.join(assignment.placement.instance_ids)}",
                pool=trial.pool,
                trial_id=trial.id,
                experiment_id=trial.experiment_id,
            )
        ]
    )
    return True


def _apply_plan(
    ctx: Context, plan: PoolPlan, state: PoolState, pool_live: list[Instance], report: PassReport
) -> None:
    now = ctx.clock.now()
    # Only stopped instances whose offering the cloud has not refused lately: a start there
    # would be refused again and the demand would wait a pass for nothing.
    warm = _WarmPool(
        [
            i
            for i in pool_live
            if i.state is InstanceState.STOPPED and state.capacity.is_available(i.offering.key, now)
        ]
    )
    planned = [
        warm.serve(launch, now) or _fresh(ctx, plan.pool, launch, now) for launch in plan.launches
    ]
    # The pool state rides along unchanged in every commit: its version serialises racing
    # planners. A plan larger than one commit (100 items in DynamoDB) goes in several, each
    # carrying the state as the last one left it; a lost race stops at the chunk it lost,
    # and the next pass plans what is still missing.
    created: list[Instance] = []
    per_commit = max(1, ctx.settings.max_commit - 1)
    for start in range(0, len(planned), per_commit):
        chunk = planned[start : start + per_commit]
        try:
            stored = ctx.store.commit([*chunk, state])
        except ConflictError:
            report.conflicts += 1
            break
        fresh = stored[-1]
        assert isinstance(fresh, PoolState)
        state = fresh
        created.extend(chunk)
    if created:
        ctx.store.append_events(
            [
                Event(
                    now,
                    EventKind.LAUNCH_PLANNED,
                    f"{i.offering.instance_type} ({i.offering.capacity_type.value}): "
                    f"{launch.reason}",
                    pool=plan.pool,
                    instance_id=i.id,
                )
                for i, launch in zip(created, plan.launches, strict=False)
            ]
        )
        report.launched.extend(i.id for i in created)

    surplus = set(plan.surplus)
    for inst in pool_live:
        if inst.id in surplus and _cancel(ctx, inst):
            report.cancelled.append(inst.id)
    stale = [
        i
        for i in pool_live
        if i.state is InstanceState.QUEUED
        and i.id not in surplus
        and now - max(i.entered_at(InstanceState.QUEUED) or i.created_at, i.redriven_at or 0.0)
        >= ctx.settings.redrive_after_s
    ]
    launches = [LaunchInstance.of(i) for i in [*created, *_mark_redriven(ctx, stale, now)]]
    if launches:
        send(ctx.queue, launches)


def _fresh(ctx: Context, pool: str, launch: PlannedLaunch, now: float) -> Instance:
    record = new_instance(ctx.ids.new("inst"), pool, launch.offering, now, launch.reason)
    return replace(record, planned_for=launch.planned_for)


@dataclass
class _WarmPool:
    """The pool's stopped instances, each serving at most one planned launch of its instance
    type and capacity type (the same zone first): a warm start boots in tens of seconds where
    a launch takes minutes, and costs nothing more once running."""

    stopped: list[Instance]

    def serve(self, launch: PlannedLaunch, now: float) -> Instance | None:
        wanted = launch.offering
        fits = [
            i
            for i in self.stopped
            if i.offering.instance_type == wanted.instance_type
            and i.offering.capacity_type is wanted.capacity_type
        ]
        if not fits:
            return None
        chosen = min(fits, key=lambda i: (i.offering.key != wanted.key, -(i.stopped_at or 0.0)))
        self.stopped.remove(chosen)
        reason = f"warm start of {chosen.cloud_id}: {launch.reason}"
        return chosen.warm_start(now, launch.planned_for, reason)


def _mark_redriven(ctx: Context, stale: list[Instance], now: float) -> list[Instance]:
    """Records whose launch message is sent again, each at most once per redrive_after_s:
    the scale-up queue is a standard one (no dedupe), so re-sending on every pass would
    launch-attempt a record once per pass while capacity is short. The mark is written
    first (conditionally); a record that moved on meanwhile is not re-sent."""
    marked: list[Instance] = []
    for inst in stale:
        try:
            (stored,) = ctx.store.commit([replace(inst, redriven_at=now)])
        except ConflictError:
            continue
        assert isinstance(stored, Instance)
        marked.append(stored)
    return marked


def _cancel(ctx: Context, inst: Instance) -> bool:
    """Undo a launch nobody needs: a QUEUED record, or an unfilled spot request."""
    now = ctx.clock.now()
    if inst.is_warm_start:
        # Back to the warm pool, stopped as it still is (a QUEUED warm start never called the
        # cloud; the planner lists only QUEUED ones as surplus).
        back = inst.transition(InstanceState.STOPPED, now, "demand went away: stays warm")
        try:
            ctx.store.commit([back])
        except ConflictError:
            return False
        return True
    if inst.state is InstanceState.REQUESTED and inst.spot_request_id:
        ctx.cloud.cancel_spot_requests([inst.spot_request_id])
    try:
        ctx.store.commit([inst.transition(InstanceState.CANCELLED, now, "demand went away")])
    except ConflictError:
        return False
    ctx.store.append_events(
        [
            Event(
                now,
                EventKind.SPOT_REQUEST_CANCELLED
                if inst.spot_request_id
                else EventKind.LAUNCH_CANCELLED,
                "launch cancelled: the demand went away",
                pool=inst.pool,
                instance_id=inst.id,
            )
        ]
    )
    return True


def _update_pending_reasons(ctx: Context, trials: list[Trial], plan: PoolPlan) -> None:
    changed = [
        replace(trial, pending_reason=reason)
        for trial in trials
        if (reason := plan.pending_reasons.get(trial.id)) is not None
        and reason != trial.pending_reason
    ]
    # A burst of submits changes thousands of reasons at once: one commit per 100 trials
    # (one DynamoDB transaction) instead of one write per trial. A lost race means some
    # trial moved on, and its new state says more than a reason: the chunk is then written
    # trial by trial, skipping the ones that moved.
    size = max(1, ctx.settings.max_commit)
    for start in range(0, len(changed), size):
        chunk = changed[start : start + size]
        try:
            ctx.store.commit(chunk)
        except ConflictError:
            for trial in chunk:
                with contextlib.suppress(ConflictError):
                    ctx.store.commit([trial])
