"""What an agent needs to run one trial: built from the experiment config and the placement."""

from __future__ import annotations

import json
from typing import Any

from corral.domain.config import ExperimentConfig
from corral.domain.trial import Trial
from corral.protocol.agent import (
    BindMount,
    CheckpointSpec,
    RegistryAuth,
    Rendezvous,
    TrialAssignment,
)
from corral.services.shared.service_context import Context

# GLOO rendezvous port between trial containers (the seeds' firewall rules open 12355).
RENDEZVOUS_PORT = 12355


def build_assignment(ctx: Context, trial: Trial, agent_id: str) -> TrialAssignment | None:
    experiment = ctx.store.get_experiment(trial.experiment_id)
    if experiment is None or trial.placement is None:
        return None
    config = _parse(experiment.config)
    parts = trial.placement.parts
    node_rank = next((n for n, (i, _) in enumerate(parts) if i == agent_id), None)
    if node_rank is None:
        return None
    gpus = list(parts[node_rank][1])
    rendezvous = None
    if len(parts) > 1:
        master = ctx.store.get_instance(parts[0][0])
        rendezvous = Rendezvous(
            master_addr=(master.address if master and master.address else "127.0.0.1"),
            master_port=RENDEZVOUS_PORT,
            world_size=trial.slots,
            node_rank=node_rank,
            nnodes=len(parts),
            local_world_size=len(gpus),
        )
    entrypoint = config.entrypoint
    return TrialAssignment(
        trial_id=trial.id,
        experiment_id=trial.experiment_id,
        image=config.image,
        # A string is a command line and runs through a shell; a list runs as it is.
        entrypoint=["sh", "-c", entrypoint] if isinstance(entrypoint, str) else list(entrypoint),
        gpus=gpus,
        hyperparameters=trial.hyperparameters,
        environment=dict(config.environment.environment_variables),
        bind_mounts=[
            BindMount(host_path=b.host_path, container_path=b.container_path, read_only=b.read_only)
            for b in config.bind_mounts
        ],
        checkpoint=CheckpointSpec(
            storage_uri=checkpoint_uri(ctx, config, trial),
            latest=trial.latest_checkpoint,
            endpoint_url=_endpoint_url(config),
        ),
        rendezvous=rendezvous,
        registry_auth=_registry_auth(config),
    )


def _registry_auth(config: ExperimentConfig) -> RegistryAuth | None:
    auth = config.environment.registry_auth
    if auth is None:
        return None
    return RegistryAuth.model_validate(auth.model_dump(mode="json"))


def _endpoint_url(config: ExperimentConfig) -> str | None:
    storage = config.checkpoint_storage
    return storage.endpoint_url if storage is not None and storage.type == "s3" else None


def checkpoint_uri(ctx: Context, config: ExperimentConfig, trial: Trial) -> str:
    storage = config.checkpoint_storage
    suffix = f"{trial.experiment_id}/{trial.id}"
    if storage is None:
        return f"{ctx.settings.default_checkpoint_uri.rstrip('/')}/{suffix}"
    if storage.type == "s3":
        return f"s3://{storage.bucket}/{_join(storage.prefix, suffix)}"
    if storage.type == "gcs":
        return f"gs://{storage.bucket}/{_join(storage.prefix, suffix)}"
    base = storage.host_path.rstrip("/")
    if storage.storage_path:
        base = f"{base}/{storage.storage_path.strip('/')}"
    return f"file://{base}/{suffix}"


def _join(prefix: str, suffix: str) -> str:
    return f"{prefix.strip('/')}/{suffix}" if prefix.strip("/") else suffix


_PARSED: dict[str, ExperimentConfig] = {}


def _parse(config: dict[str, Any]) -> ExperimentConfig:
    """Parse an experiment's stored config once per container (heartbeats ask often).

    Keyed by the config's content, not the experiment id: ids repeat across stores (tests,
    simulator runs in one process), and a cache keyed by id would hand back another's."""
    key = json.dumps(config, sort_keys=True, default=str)
    parsed = _PARSED.get(key)
    if parsed is None:
        if len(_PARSED) > 512:
            _PARSED.clear()
        parsed = _PARSED[key] = ExperimentConfig.model_validate(config)
    return parsed
