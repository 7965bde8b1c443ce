"""The idle reaper (timer): declare lost the agents silent past the heartbeat timeout (as
reconcile does, but every minute: ``services.shared.lost_agents``), drain agents idle past
max_idle_agent_period, confirm them empty, terminate them; longest idle first, never below
min_instances, never a busy agent, never one the pending demand counts on. In pools with
``consolidate``, each pass also empties at most one under-used agent by moving its
checkpointed trials to free GPUs elsewhere, and in every spot pool (unless
``move_fallback_to_spot`` is off) one on-demand fallback agent once spot is back
(``corral.domain.consolidation``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from corral.domain.consolidation import plan_consolidation
from corral.domain.errors import ConflictError
from corral.domain.fallback import is_fallback
from corral.domain.instance import LIVE_STATES, Instance, InstanceState
from corral.domain.policy import PoolPolicy
from corral.domain.records import EventKind
from corral.domain.retired_pools import with_retired
from corral.domain.trial import Trial, TrialState
from corral.ports.store import commit_one
from corral.services.schedule_pass import plan_all
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.instance_removal import (
    park,
    take_away,
    terminate,
    wake_scheduler,
)
from corral.services.shared.lost_agents import declare_silent_agents
from corral.services.shared.service_context import Context


@dataclass
class ReapReport:
    drained: list[str] = field(default_factory=list)
    undrained: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # into the warm pool
    lost: list[str] = field(default_factory=list)  # silent agents: trials requeued, terminated
    consolidated: list[str] = field(default_factory=list)  # agents drained to move work off


def run_idle_reap(ctx: Context) -> ReapReport:
    report = ReapReport()
    now = ctx.clock.now()
    live = ctx.store.instances(states=LIVE_STATES)
    heartbeats = ctx.store.heartbeats([i.id for i in live])
    report.lost = declare_silent_agents(ctx, live, heartbeats)
    if report.lost:  # on their way out, and their trials wait again: plan without them
        live = ctx.store.instances(states=LIVE_STATES)
    waiting = ctx.store.trials(states={TrialState.PENDING, TrialState.PREEMPTED})
    _, plans = plan_all(ctx, waiting, live)
    # A heartbeat this recent that reports nothing confirms an agent empty at once.
    fresh_after = now - 3 * ctx.settings.heartbeat_interval_s
    # Pools removed from the config while they still hold instances are wound down.
    for name, pool in with_retired(ctx.pools, (i.pool for i in live)).items():
        demand = plans.get(name)
        plan = ctx.policy.plan_reaping(
            pool,
            [i for i in live if i.pool == name],
            now,
            reserved=demand.reserved if demand is not None else frozenset(),
            heartbeats=heartbeats,
            room_needed=demand.room_needed if demand is not None else 0,
            fresh_after=fresh_after,
            month_to_date_usd=demand.month_to_date_usd if demand is not None else None,
        )
        for decision in plan.drain:
            drained = _move(ctx, decision.apply(now))
            if drained is None:
                continue
            report.drained.append(drained.id)
            if drained.id in plan.park_after_drain:
                reason = "drained and confirmed empty: stopped into the warm pool"
                if park(ctx, drained, reason):
                    report.stopped.append(drained.id)
            elif drained.id in plan.terminate_after_drain:
                empty = drained.transition(
                    InstanceState.TERMINATING, now, "drained and confirmed empty"
                )
                if terminate(ctx, empty, EventKind.INSTANCE_TERMINATED):
                    report.terminated.append(drained.id)
        for decision in plan.undrain:
            if _move(ctx, decision.apply(now)) is not None:
                report.undrained.append(decision.instance.id)
        for decision in plan.terminate:
            if decision.target is InstanceState.STOPPING:
                if park(ctx, decision.instance, decision.reason):
                    report.stopped.append(decision.instance.id)
            elif terminate(ctx, decision.apply(now), EventKind.INSTANCE_TERMINATED):
                report.terminated.append(decision.instance.id)
    _consolidate(ctx, live, waiting, report)
    freed = report.terminated or report.stopped or report.lost
    if report.undrained or (freed and any(p.unserved for p in plans.values())):
        # Taken-back agents get work now; freed room under max_instances gets a launch now.
        wake_scheduler(ctx, "the reaper changed the fleet the pending demand waits for")
    return report


def _consolidate(
    ctx: Context, live: list[Instance], waiting: list[Trial], report: ReapReport
) -> None:
    """Pools that consolidate, and pools with a busy on-demand fallback agent to move back
    to spot: drain the one agent worth emptying and requeue its trials, which it stops
    (checkpointing) at its next heartbeat; they land on the free GPUs the plan found.
    Agents this pass already moved are left for the next one."""
    touched = {*report.drained, *report.undrained, *report.terminated}
    untouched = [i for i in live if i.id not in touched]
    pools = [p for p in ctx.pools.values() if p.consolidate or _busy_fallback(p, untouched)]
    if not pools:
        return
    now = ctx.clock.now()
    for pool in pools:
        if any(t.pool == pool.name for t in waiting):
            continue  # free GPUs belong to the waiting work first (and a move may be under way)
        # The pool's running trials only, and only for the pools that may move some.
        found = ctx.store.trials(states={TrialState.RUNNING}, pool=pool.name)
        running = {t.id: t for t in found}
        move = plan_consolidation(pool, untouched, running, now, waiting=False)
        if move is None:
            continue
        drained = replace(
            move.source.transition(InstanceState.DRAINING, now, move.reason), consolidated_at=now
        )
        try:
            take_away(ctx, drained, move.reason, still_up=True)
        except ConflictError:
            continue  # it changed meanwhile (a trial ended, a notice): the next pass decides
        log_instance_event(ctx, drained, EventKind.AGENT_DRAINING, move.reason, now)
        report.consolidated.append(drained.id)


def _busy_fallback(pool: PoolPolicy, instances: list[Instance]) -> bool:
    """Whether ``pool`` moves fallback capacity back to spot and runs some now (the only
    case a pool that does not consolidate reads its running trials for)."""
    return pool.move_fallback_to_spot and any(
        i.pool == pool.name and i.state is InstanceState.BUSY and is_fallback(pool, i.offering)
        for i in instances
    )


def _move(ctx: Context, updated: Instance) -> Instance | None:
    """Commit one reaper transition and log it; the stored record, or None on a lost race."""
    try:
        stored = commit_one(ctx.store, updated)
    except ConflictError:
        return None
    draining = updated.state is InstanceState.DRAINING
    kind = EventKind.AGENT_DRAINING if draining else EventKind.AGENT_UNDRAINED
    log_instance_event(ctx, updated, kind, updated.history[-1].reason, ctx.clock.now())
    return stored
