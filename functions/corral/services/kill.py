"""Killing experiments and trials: nothing left to run, and running containers stopped.

A trial on an agent goes to STOPPING; the agent is told on its next heartbeat and the trial
is CANCELLED when the agent confirms (or when the agent is lost). Trials not on an agent are
CANCELLED at once.
"""

from __future__ import annotations

from dataclasses import replace

from corral.domain.errors import ConflictError, NotFoundError
from corral.domain.records import Event, EventKind, Experiment
from corral.domain.trial import Trial, TrialState
from corral.ports.store import commit_one, retry_on_conflict
from corral.services.shared.service_context import Context


def kill_experiment(ctx: Context, experiment_id: str) -> Experiment:
    experiment = ctx.store.get_experiment(experiment_id)
    if experiment is None:
        raise NotFoundError(f"no experiment {experiment_id}")
    now = ctx.clock.now()
    if experiment.killed_at is None:
        try:
            experiment = commit_one(ctx.store, replace(experiment, killed_at=now))
        except ConflictError:
            experiment = ctx.store.get_experiment(experiment_id) or experiment
        ctx.store.append_events(
            [
                Event(
                    now,
                    EventKind.EXPERIMENT_KILLED,
                    "killed by user",
                    pool=experiment.pool,
                    experiment_id=experiment_id,
                )
            ]
        )
    for trial in ctx.store.trials(experiment_id=experiment_id):
        kill_trial(ctx, trial)
    return experiment


def kill_trial(ctx: Context, trial: Trial) -> Trial:
    latest = [trial]

    def step() -> Trial:
        current = latest[0]
        if not current.is_active or current.state is TrialState.STOPPING:
            return current
        now = ctx.clock.now()
        if current.state is TrialState.PENDING:
            target = current.transition(TrialState.CANCELLED, now, "killed by user")
        else:  # it holds GPUs: its agents stop it, then it is CANCELLED
            target = current.transition(TrialState.STOPPING, now, "killed by user")
        try:
            return commit_one(ctx.store, target)
        except ConflictError:
            latest[0] = ctx.store.get_trial(trial.id) or current
            raise

    try:
        return retry_on_conflict(step)
    except ConflictError:
        return latest[0]
