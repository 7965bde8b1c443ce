"""Killing experiments and trials: nothing left to run, and running containers stopped.

A trial on an agent goes to STOPPING; the agent is told on its next heartbeat and the trial
is CANCELLED when the agent confirms (or when the agent is lost). Trials not on an agent are
CANCELLED at once.

Who may: ``by`` names the user asking (the API passes the caller's principal name); only the
experiment's owner or an admin may kill it (``corral.domain.access``), else ``Forbidden``
with nothing written. ``by=None`` is a trusted caller inside the control plane (tests,
operators' scripts using the services directly), never a request.
"""

from __future__ import annotations

from dataclasses import replace

from corral.domain.access import change_refusal
from corral.domain.errors import ConflictError, Forbidden, NotFoundError
from corral.domain.records import Event, EventKind, Experiment
from corral.domain.trial import Trial, TrialState
from corral.ports.store import commit_one, retry_on_conflict
from corral.services.shared.service_context import Context


def kill_experiment(ctx: Context, experiment_id: str, *, by: str | None = None) -> Experiment:
    experiment = ctx.store.get_experiment(experiment_id)
    if experiment is None:
        raise NotFoundError(f"no experiment {experiment_id}")
    if by is not None:
        what = f"{'command' if experiment.is_command else 'experiment'} {experiment_id}"
        refusal = change_refusal(by, ctx.admins, owner=experiment.owner, what=what, action="kill")
        if refusal is not None:
            raise Forbidden(refusal)
    now = ctx.clock.now()
    reason = f"killed by {by}" if by else "killed by user"
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
                    reason,
                    pool=experiment.pool,
                    experiment_id=experiment_id,
                    data={"by": by} if by else {},
                )
            ]
        )
    for trial in ctx.store.trials(experiment_id=experiment_id):
        kill_trial(ctx, trial, reason)
    return experiment


def kill_trial(ctx: Context, trial: Trial, reason: str = "killed by user") -> Trial:
    latest = [trial]

    def step() -> Trial:
        current = latest[0]
        if not current.is_active or current.state is TrialState.STOPPING:
            return current
        now = ctx.clock.now()
        if current.state is TrialState.PENDING:
            target = current.transition(TrialState.CANCELLED, now, reason)
        else:  # it holds GPUs: its agents stop it, then it is CANCELLED
            target = current.transition(TrialState.STOPPING, now, reason)
        try:
            return commit_one(ctx.store, target)
        except ConflictError:
            latest[0] = ctx.store.get_trial(trial.id) or current
            raise

    try:
        return retry_on_conflict(step)
    except ConflictError:
        return latest[0]
