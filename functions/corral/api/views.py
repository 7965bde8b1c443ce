"""The API's read models (``schemas/public.py``): pure reads of the Store, priced with the
domain's cost rules and the services' accounting; the pool view shows the schedule pass's
plan (``services.schedule_pass.plan_all``), computed without writing.

Nothing here writes. Figures that change while something runs (a trial's cost, an
instance's idle time) are computed at read time from ``ctx.clock`` rather than stored, so a
view never needs a write to stay current and never races the services.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from corral.api.metrics_views import by_trial, experiment_best, trial_fields
from corral.api.schemas.public import (
    BackoffView,
    BreakerView,
    BudgetView,
    EventsPage,
    EventView,
    ExperimentDetail,
    ExperimentList,
    ExperimentView,
    HistoryItem,
    InstanceList,
    InstanceView,
    LogLineView,
    LogsPage,
    OfferingView,
    PlacementPart,
    PoolList,
    PoolView,
    TrialList,
    TrialView,
)
from corral.domain import backoff, cost
from corral.domain.errors import NotFoundError
from corral.domain.instance import LIVE_STATES, Instance, InstanceState
from corral.domain.metrics import MetricSummary
from corral.domain.planner import PoolPlan
from corral.domain.policy import PoolPolicy
from corral.domain.records import Event, Experiment, ExperimentState, Heartbeat
from corral.domain.state_machine import HistoryEntry
from corral.domain.trial import ACTIVE_STATES, Trial, TrialState
from corral.services.schedule_pass import plan_all
from corral.services.shared.service_context import Context
from corral.services.shared.spend import disk_rate, pool_month_to_date, settle_trial_cost

HOUR_S = 3600.0
# The longest run of events sharing one timestamp an events page will read to end on a
# timestamp boundary (see ``events_page``).
MAX_EVENT_GROUP = 5_000


# ---- experiments ----------------------------------------------------------------------------
def experiment_state(experiment: Experiment, trials: Iterable[Trial]) -> ExperimentState:
    """Derived, never stored: any trial still active -> ACTIVE (STOPPING once killed); all
    done -> FAILED if one failed, else CANCELLED if one was cancelled or the experiment was
    killed before they all completed, else COMPLETED. Trials a crashed submission has not
    written yet count as active (a retried POST with the same client token writes them)."""
    states = [t.state for t in trials]
    if len(states) < len(experiment.trial_ids) or any(s in ACTIVE_STATES for s in states):
        return ExperimentState.STOPPING if experiment.killed_at else ExperimentState.ACTIVE
    if TrialState.FAILED in states:
        return ExperimentState.FAILED
    if TrialState.CANCELLED in states:
        return ExperimentState.CANCELLED
    return ExperimentState.COMPLETED


def get_experiment(ctx: Context, experiment_id: str) -> Experiment:
    experiment = ctx.store.get_experiment(experiment_id)
    if experiment is None:
        raise NotFoundError(f"no experiment {experiment_id}")
    return experiment


def experiment_view(ctx: Context, experiment: Experiment) -> ExperimentView:
    return _experiment(ctx, experiment, ctx.store.trials(experiment_id=experiment.id))[0]


SECRET_SHOWN = "**********"  # what pydantic shows for a SecretStr


def redacted(config: dict[str, Any]) -> dict[str, Any]:
    """A stored experiment config as the API shows it: the registry password (stored for the
    agents that pull its image) replaced by ``**********``."""
    environment = config.get("environment")
    if not isinstance(environment, dict):
        return config
    auth = environment.get("registry_auth")
    if not isinstance(auth, dict) or auth.get("password") is None:
        return config
    shown = {**environment, "registry_auth": {**auth, "password": SECRET_SHOWN}}
    return {**config, "environment": shown}


# Trials shown inline in an experiment's detail (and in the reply to its submission): a
# 10,000-trial grid would not fit a 6 MB Lambda response; the trials route pages the rest.
DETAIL_TRIALS = 100


def experiment_detail(ctx: Context, experiment_id: str) -> ExperimentDetail:
    experiment = get_experiment(ctx, experiment_id)
    summary, trials = _experiment(ctx, experiment, ctx.store.trials(experiment_id=experiment.id))
    return ExperimentDetail(
        **summary.model_dump(),
        config=redacted(experiment.config),
        trials=trials[:DETAIL_TRIALS],
        trials_truncated=len(trials) > DETAIL_TRIALS,
    )


# How many of the newest experiments an owner filter reads at most. The store lists newest
# first with no filter, so the filter reads a growing window until it has ``limit`` matches.
MAX_OWNER_SCAN = 10_000


def list_experiments(ctx: Context, limit: int, owner: str | None = None) -> ExperimentList:
    """The ``limit`` newest experiments, or with ``owner`` the newest ``limit`` of theirs
    (``truncated`` when the newest ``MAX_OWNER_SCAN`` held fewer and more exist)."""
    if owner is None:
        found = ctx.store.experiments(limit=limit)
        return ExperimentList(experiments=[experiment_view(ctx, e) for e in found])
    # A small window first (a user listing their recent work), then, if that is short, the
    # whole scan at once: at most two reads, never the same rows re-read four times.
    for window in dict.fromkeys((min(limit * 4, MAX_OWNER_SCAN), MAX_OWNER_SCAN)):
        batch = ctx.store.experiments(limit=window)
        mine = [e for e in batch if e.owner == owner][:limit]
        exhausted = len(batch) < window
        if len(mine) == limit or exhausted:
            break
    return ExperimentList(
        experiments=[experiment_view(ctx, e) for e in mine],
        truncated=len(mine) < limit and not exhausted,
    )


def experiment_trials(
    ctx: Context, experiment_id: str, offset: int = 0, limit: int = 500
) -> TrialList:
    experiment = get_experiment(ctx, experiment_id)
    trials = _experiment(ctx, experiment, ctx.store.trials(experiment_id=experiment_id))[1]
    end = offset + limit
    return TrialList(
        trials=trials[offset:end],
        total=len(trials),
        next_offset=end if end < len(trials) else None,
    )


def _experiment(
    ctx: Context, experiment: Experiment, trials: list[Trial]
) -> tuple[ExperimentView, list[TrialView]]:
    order = {t: n for n, t in enumerate(experiment.trial_ids)}
    trials = sorted(trials, key=lambda t: (order.get(t.id, len(order)), t.id))
    # Metric summaries only (never the points): one batched read for all the trials.
    metrics = by_trial(ctx.store.metric_summaries([t.id for t in trials]))
    views = [_trial(ctx, t, metrics.get(t.id, []), owner=experiment.owner) for t in trials]
    counts = Counter(t.state.value for t in trials)
    summary = ExperimentView(
        id=experiment.id,
        name=experiment.name,
        pool=experiment.pool,
        state=experiment_state(experiment, trials).value,
        owner=experiment.owner,
        is_command=experiment.is_command,
        submitted_at=experiment.submitted_at,
        killed_at=experiment.killed_at,
        trial_count=len(experiment.trial_ids),
        trials_by_state={s.value: counts.get(s.value, 0) for s in TrialState},
        cost_usd=sum(v.cost_usd for v in views),
        gpu_hours=sum(v.gpu_hours for v in views),
        best=experiment_best(experiment, trials, metrics),
    )
    return summary, views


# ---- trials ---------------------------------------------------------------------------------
def trial_view(ctx: Context, trial_id: str) -> TrialView:
    trial = ctx.store.get_trial(trial_id)
    if trial is None:
        raise NotFoundError(f"no trial {trial_id}")
    experiment = ctx.store.get_experiment(trial.experiment_id)
    return _trial(ctx, trial, owner=experiment.owner if experiment else None)


def _waiting_reason(trial: Trial) -> str | None:
    if trial.state is TrialState.PENDING:
        return trial.pending_reason or "waiting for the next schedule pass"
    if trial.state is TrialState.ASSIGNED and trial.placement is not None:
        where = ", ".join(trial.placement.instance_ids)
        return f"assigned to {where}: waiting for the agent to start it"
    if trial.state is TrialState.STOPPING:
        return "stopping: waiting for the agent to confirm"
    if trial.state is TrialState.PREEMPTED:
        return "preempted: being requeued to resume from its last checkpoint"
    return None


def _trial(
    ctx: Context,
    trial: Trial,
    metrics: list[MetricSummary] | None = None,
    *,
    owner: str | None,
) -> TrialView:
    # A trial's cost is settled when it leaves its GPUs; while it holds them, price the
    # stretch since it was assigned as the settlement would (read-only: nothing is written).
    instances = {
        i: inst
        for i in (trial.placement.instance_ids if trial.placement else ())
        if (inst := ctx.store.get_instance(i)) is not None
    }
    priced = settle_trial_cost(trial, instances, ctx.clock.now())
    if metrics is None:
        metrics = ctx.store.metric_summaries([trial.id])
    latest_metrics, best_value = trial_fields(metrics)
    return TrialView(
        id=trial.id,
        experiment_id=trial.experiment_id,
        owner=owner,
        pool=trial.pool,
        state=trial.state.value,
        slots=trial.slots,
        priority=trial.priority,
        submitted_at=trial.submitted_at,
        pending_reason=_waiting_reason(trial),
        placement=[
            PlacementPart(instance_id=i, gpus=list(g))
            for i, g in (trial.placement.parts if trial.placement else ())
        ],
        restarts=trial.restarts,
        max_restarts=trial.max_restarts,
        preemptions=trial.preemptions,
        latest_checkpoint=trial.latest_checkpoint,
        exit_code=trial.exit_code,
        cost_usd=priced.cost_usd,
        gpu_hours=priced.gpu_seconds / HOUR_S,
        hyperparameters=trial.hyperparameters,
        ran_on=list(trial.ran_on),
        history=_history(trial.history),
        latest_metrics=latest_metrics,
        best_value=best_value,
    )


def _history(history: Iterable[HistoryEntry]) -> list[HistoryItem]:
    return [HistoryItem(state=h.state, at=h.at, reason=h.reason) for h in history]


# ---- instances ------------------------------------------------------------------------------
def list_instances(
    ctx: Context, *, pool: str | None = None, include_terminal: bool = False
) -> InstanceList:
    states = None if include_terminal else LIVE_STATES
    found = sorted(
        ctx.store.instances(pool=pool, states=states), key=lambda i: (i.created_at, i.id)
    )
    beats = ctx.store.heartbeats([i.id for i in found])
    return InstanceList(instances=[_instance(ctx, i, beats.get(i.id)) for i in found])


def _instance(ctx: Context, inst: Instance, beat: Heartbeat | None) -> InstanceView:
    now = ctx.clock.now()
    off = inst.offering
    idle = inst.idle_since is not None and inst.state in (
        InstanceState.IDLE,
        InstanceState.DRAINING,
    )
    return InstanceView(
        id=inst.id,
        pool=inst.pool,
        state=inst.state.value,
        offering=off.key,
        instance_type=off.instance_type,
        location=off.location,
        capacity_type=off.capacity_type.value,
        slots=inst.slots,
        free_slots=inst.free_slots,
        hourly_price_usd=off.hourly_price,
        cloud_id=inst.cloud_id,
        spot_request_id=inst.spot_request_id,
        address=inst.address,
        created_at=inst.created_at,
        launched_at=inst.launched_at,
        registered_at=inst.registered_at,
        terminated_at=inst.terminated_at,
        idle_since=inst.idle_since,
        idle_s=now - inst.idle_since if idle and inst.idle_since is not None else None,
        cost_usd=cost.instance_cost_usd(inst, now, disk_rate(ctx.pool(inst.pool))),
        last_heartbeat_at=beat.at if beat else None,
        heartbeat_age_s=now - beat.at if beat else None,
        gpu_utilization_pct=list(beat.gpu_utilization) if beat else [],
        gpu_memory_used_mib=list(beat.gpu_memory_used_mib) if beat else [],
        trials=list(inst.trial_ids),
        attempt=inst.attempt,
        last_error=inst.last_error,
        interruption_notice_at=inst.interruption_notice_at,
        history=_history(inst.history),
    )


# ---- pools ----------------------------------------------------------------------------------
def list_pools(ctx: Context) -> PoolList:
    live = ctx.store.instances(states=LIVE_STATES)
    pending = ctx.store.trials(states={TrialState.PENDING})
    # The schedule pass's placement and plans, computed without writing anything: which
    # pending trials no launch serves, and why.
    _, plans = plan_all(ctx, pending, live)
    return PoolList(
        pools=[
            _pool(
                ctx,
                pool,
                [i for i in live if i.pool == name],
                [t for t in pending if t.pool == name],
                plans.get(name),
            )
            for name, pool in ctx.pools.items()
        ]
    )


def pool_view(ctx: Context, name: str) -> PoolView:
    for view in list_pools(ctx).pools:
        if view.name == name:
            return view
    raise NotFoundError(f"no pool {name}")


def cannot_serve_reason(plan: PoolPlan | None) -> str | None:
    """One line on the pending trials of a pool that no launch serves, or None."""
    if plan is None or not plan.unserved:
        return None
    why = Counter(plan.pending_reasons.get(t, "no launch planned") for t in plan.unserved)
    (top, _), *others = why.most_common()
    more = f" (and {len(others)} other reason(s))" if others else ""
    return f"{len(plan.unserved)} pending trial(s) no launch serves: {top}{more}"


def _pool(
    ctx: Context,
    pool: PoolPolicy,
    live: list[Instance],
    pending: list[Trial],
    plan: PoolPlan | None,
) -> PoolView:
    now = ctx.clock.now()
    state = ctx.store.pool_state(pool.name)
    by_state = Counter(i.state.value for i in live)
    burn = cost.hourly_burn_usd(live, pool.disk_hourly_usd)
    budget = cost.budget_state(
        pool, pool_month_to_date(state, live, now, pool.disk_hourly_usd), burn
    )
    memory = state.capacity
    backed_off = backoff.is_backed_off(state, now)
    return PoolView(
        name=pool.name,
        is_default=pool.name == ctx.default_pool,
        min_instances=pool.min_instances,
        max_instances=pool.max_instances,
        instances_by_state={s.value: by_state[s.value] for s in InstanceState if s in LIVE_STATES},
        trials_pending=len(pending),
        trials_running=len(ctx.store.trials(states={TrialState.RUNNING}, pool=pool.name)),
        trials_unserved=len(plan.unserved) if plan is not None else 0,
        cannot_serve=cannot_serve_reason(plan),
        offerings=[
            OfferingView(
                key=o.key,
                instance_type=o.instance_type,
                location=o.location,
                capacity_type=o.capacity_type.value,
                slots=o.slots,
                hourly_price_usd=o.hourly_price,
                available=memory.is_available(o.key, now),
                unavailable_until=_until(memory.unavailable_until, o.key, now),
            )
            for o in pool.offerings()
        ],
        blocked_reason=backoff.pending_reason(state, now),
        backoff=BackoffView(
            active=backed_off,
            until=state.backoff_until if backed_off else None,
            failures=state.backoff_failures,
            reason=state.backoff_reason,
        ),
        breaker=BreakerView(
            open=backoff.is_breaker_open(state, now),
            since=state.breaker_open_since,
            boot_failures=state.boot_failures,
            reason=state.breaker_reason,
        ),
        budget=BudgetView(
            spent_usd=budget.spent_usd,
            budget_usd=budget.budget_usd,
            remaining_usd=budget.remaining_usd,
            exhausted=budget.exhausted,
            hourly_burn_usd=burn,
        ),
    )


def _until(unavailable: Mapping[str, float], key: str, now: float) -> float | None:
    until = unavailable.get(key)
    return until if until is not None and until > now else None


# ---- event log and trial logs ---------------------------------------------------------------
def events_page(ctx: Context, *, since: float, limit: int, pool: str | None) -> EventsPage:
    """Events strictly after ``since``, oldest first.

    The cursor is a timestamp, so a page must never end in the middle of a group of events
    sharing one timestamp: the next page (``at > next_since``) would skip the rest of the
    group. A full page is cut back to the last timestamp boundary; a page that is one group
    from end to end is widened to the whole group instead.
    """
    batch = ctx.store.events(since=since, limit=limit + 1, pool=pool)
    has_more = len(batch) > limit
    page = batch[:limit]
    if has_more:
        cut = limit
        while cut > 0 and batch[cut - 1].at == batch[cut].at:
            cut -= 1
        if cut:
            page = batch[:cut]
        else:
            group = ctx.store.events(since=since, limit=MAX_EVENT_GROUP, pool=pool)
            page = [e for e in group if e.at == batch[0].at]
    return EventsPage(
        events=[_event(e) for e in page],
        next_since=page[-1].at if page else since,
        has_more=has_more,
    )


def _event(event: Event) -> EventView:
    return EventView(
        at=event.at,
        kind=event.kind.value,
        message=event.message,
        pool=event.pool,
        instance_id=event.instance_id,
        trial_id=event.trial_id,
        experiment_id=event.experiment_id,
        data=event.data,
    )


def logs_page(ctx: Context, trial_id: str, *, after_seq: int, limit: int) -> LogsPage:
    trial = ctx.store.get_trial(trial_id)
    if trial is None:
        raise NotFoundError(f"no trial {trial_id}")
    # The trial is read before its lines: when it is done, every line its agent sent before
    # the terminal status is already stored, so a page that ends there is the whole output.
    lines = ctx.store.logs(trial_id, after_seq=after_seq, limit=limit + 1)
    page = lines[:limit]
    next_after_seq = page[-1].seq if page else after_seq
    has_more = len(lines) > limit
    done = not trial.is_active
    end = trial.log_end_seq if done else None
    return LogsPage(
        trial_id=trial_id,
        trial_state=trial.state.value,
        trial_done=done,
        exit_code=trial.exit_code,
        lines=[LogLineView(seq=x.seq, at=x.at, line=x.line, stream=x.stream) for x in page],
        next_after_seq=next_after_seq,
        has_more=has_more,
        log_end_seq=end,
        logs_complete=done and not has_more and (end is None or next_after_seq >= end),
    )
