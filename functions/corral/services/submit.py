"""Submitting experiments and commands: validate against the pools, write the experiment and
its trials as PENDING, and wake the scheduler."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from corral.domain.config import CommandConfig, ExperimentConfig, command_job, expand_trials
from corral.domain.planner import infeasible_reason
from corral.domain.policy import PoolPolicy
from corral.domain.records import Event, EventKind, Experiment
from corral.domain.trial import Trial, new_trial
from corral.ports.commands import Schedule, send
from corral.services.shared.service_context import Context


class SubmitError(ValueError):
    """A submission that cannot run, with the config field to blame (the API answers 4xx)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Submitted:
    experiment: Experiment
    trials: tuple[Trial, ...]
    created: bool  # False when the client token matched an earlier submission


def trial_id(experiment_id: str, index: int) -> str:
    return f"{experiment_id}.t{index:04d}"


def submit_experiment(
    ctx: Context,
    config: ExperimentConfig,
    *,
    owner: str | None = None,
    client_token: str | None = None,
    is_command: bool = False,
) -> Submitted:
    pool_name = config.resources.resource_pool or ctx.default_pool
    pool = ctx.pool(pool_name)
    if pool is None:
        known = ", ".join(sorted(ctx.pools)) or "none"
        raise SubmitError(
            "resources.resource_pool", f"no pool named {pool_name!r} (pools: {known})"
        )
    slots = config.resources.slots_per_trial
    reason = infeasible_reason(slots, pool)
    if reason is not None:
        raise SubmitError("resources.slots_per_trial", reason)

    config = with_image(config, pool)

    # A client token makes the submission idempotent: a retried POST finds the experiment
    # (and fills in any trials a crash left unwritten) instead of creating a second one.
    experiment_id = _experiment_id(ctx, owner, client_token)
    existing = ctx.store.get_experiment(experiment_id)
    stored_config = config.model_dump(mode="json")
    if existing is not None and (existing.config, existing.pool) != (stored_config, pool_name):
        # A retry repeats its request; the same token with another config is a mistake, and
        # answering with the first experiment (or adding the new config's trials to it) would
        # run work nobody asked for.
        raise SubmitError(
            "client_token",
            f"already used for experiment {existing.id}, with another config: use a new token",
        )
    now = ctx.clock.now()
    hyperparameters = expand_trials(config)
    trials = [
        new_trial(
            trial_id(experiment_id, n),
            experiment_id,
            pool_name,
            slots,
            now,
            priority=config.priority,
            max_restarts=config.max_restarts,
            hyperparameters=hp,
        )
        for n, hp in enumerate(hyperparameters)
    ]
    experiment = existing or Experiment(
        id=experiment_id,
        name=config.name,
        pool=pool_name,
        submitted_at=now,
        config=stored_config,
        trial_ids=tuple(t.id for t in trials),
        is_command=is_command,
        owner=owner,
    )
    if existing is None:
        # Intent first: the experiment names all its trials before any trial exists.
        ctx.store.commit([experiment])
    # A new experiment's trials cannot exist yet (their ids derive from its fresh id); only
    # a retried submission reads which ones a crash left unwritten.
    missing = (
        trials if existing is None else [t for t in trials if ctx.store.get_trial(t.id) is None]
    )
    written: list[Trial] = []
    for chunk in _chunks(missing, ctx.settings.max_commit):
        written.extend(r for r in ctx.store.commit(chunk) if isinstance(r, Trial))
    if missing:
        ctx.store.append_events(
            [
                Event(
                    now,
                    EventKind.EXPERIMENT_SUBMITTED,
                    f"{len(trials)} trial(s) of {slots} GPU(s) in pool {pool_name}",
                    pool=pool_name,
                    experiment_id=experiment_id,
                )
            ]
        )
        send(ctx.queue, [Schedule.for_submit(experiment_id)])
    if existing is None:
        return Submitted(experiment, tuple(written), created=True)
    stored = tuple(t for t in (ctx.store.get_trial(t.id) for t in trials) if t is not None)
    return Submitted(experiment, stored, created=False)


def with_image(config: ExperimentConfig, pool: PoolPolicy) -> ExperimentConfig:
    """The config with the one image its trials run in, stored with it so the experiment's
    record names it: its own (a ``{cpu, gpu}`` map picked by whether its trials have GPUs),
    else the pool's ``task_container_defaults.image``, else Corral's default. Determined
    applies its default the same way, when the experiment is created."""
    # A slot of a pool of zero-GPU types (cpu_slots_allowed) is a CPU slot.
    gpus = pool.gpu_slots and config.resources.slots_per_trial > 0
    image = config.trial_image(pool.gpu_slots) or pool.default_image(gpus)
    if image == config.image and config.environment.image in (None, image):
        return config
    environment = config.environment.model_copy(update={"image": None})
    return config.model_copy(update={"image": image, "environment": environment})


def run_command(
    ctx: Context,
    config: CommandConfig,
    argv: Sequence[str],
    *,
    owner: str | None = None,
    client_token: str | None = None,
) -> Submitted:
    return submit_experiment(
        ctx, command_job(config, argv), owner=owner, client_token=client_token, is_command=True
    )


def _experiment_id(ctx: Context, owner: str | None, client_token: str | None) -> str:
    if client_token is None:
        return ctx.ids.new("exp")
    digest = hashlib.sha256(f"{owner or ''}\0{client_token}".encode()).hexdigest()
    return f"exp-{digest[:16]}"


def _chunks(items: Sequence[Trial], size: int) -> list[list[Trial]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
