"""Configuration models: cluster (resource pools), experiments and commands.

Public API: import from ``corral.domain.config``; the submodules are an implementation detail.

The experiment and hyperparameter models load on first use (``__getattr__``): a Lambda
function that only reads the cluster config never builds their pydantic validators
(docs/benchmarks.md, "Handler cold start").
"""

import importlib
from typing import TYPE_CHECKING, Any

from corral.domain.config.aws import AwsNetworkInterface, AwsProvider, AwsTag
from corral.domain.config.cluster import ClusterConfig, Provider, ResourcePool
from corral.domain.config.common import CommonProvider, Ownership
from corral.domain.config.deployment import (
    DeploymentDefaults,
    DeploymentValue,
    defaults_from_env,
)
from corral.domain.config.durations import (
    Duration,
    PositiveDuration,
    format_duration,
    parse_duration,
)
from corral.domain.config.errors import ConfigError, Problem
from corral.domain.config.gcp import (
    GcpInstanceType,
    GcpNetworkInterface,
    GcpProvider,
    GcpServiceAccount,
    GpuType,
)
from corral.domain.config.loader import (
    LoadedConfig,
    cluster_config_from_mapping,
    load_cluster_config,
    load_command_config,
    load_experiment_config,
    parse_yaml,
    read_source,
    validate,
)

if TYPE_CHECKING:
    from corral.domain.config.experiment import (
        DEFAULT_PRIORITY,
        BindMount,
        CheckpointStorage,
        CommandConfig,
        Environment,
        ExperimentConfig,
        GcsStorage,
        Resources,
        S3Storage,
        SharedFsStorage,
        command_job,
        expand_trials,
    )
    from corral.domain.config.hyperparameters import (
        MAX_GRID_TRIALS,
        MAX_TRIALS,
        CategoricalHP,
        ConstHP,
        DoubleHP,
        Hyperparameter,
        IntHP,
        LogHP,
        SearcherConfig,
    )

_LAZY = {
    **dict.fromkeys(
        [
            "DEFAULT_PRIORITY",
            "BindMount",
            "CheckpointStorage",
            "CommandConfig",
            "Environment",
            "ExperimentConfig",
            "GcsStorage",
            "Resources",
            "S3Storage",
            "SharedFsStorage",
            "command_job",
            "expand_trials",
        ],
        "corral.domain.config.experiment",
    ),
    **dict.fromkeys(
        [
            "MAX_GRID_TRIALS",
            "MAX_TRIALS",
            "CategoricalHP",
            "ConstHP",
            "DoubleHP",
            "Hyperparameter",
            "IntHP",
            "LogHP",
            "SearcherConfig",
        ],
        "corral.domain.config.hyperparameters",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_GRID_TRIALS",
    "MAX_TRIALS",
    "AwsNetworkInterface",
    "AwsProvider",
    "AwsTag",
    "BindMount",
    "CategoricalHP",
    "CheckpointStorage",
    "ClusterConfig",
    "CommandConfig",
    "CommonProvider",
    "ConfigError",
    "ConstHP",
    "DeploymentDefaults",
    "DeploymentValue",
    "DoubleHP",
    "Duration",
    "Environment",
    "ExperimentConfig",
    "GcpInstanceType",
    "GcpNetworkInterface",
    "GcpProvider",
    "GcpServiceAccount",
    "GcsStorage",
    "GpuType",
    "Hyperparameter",
    "IntHP",
    "LoadedConfig",
    "LogHP",
    "Ownership",
    "PositiveDuration",
    "Problem",
    "Provider",
    "ResourcePool",
    "Resources",
    "S3Storage",
    "SearcherConfig",
    "SharedFsStorage",
    "cluster_config_from_mapping",
    "command_job",
    "defaults_from_env",
    "expand_trials",
    "format_duration",
    "load_cluster_config",
    "load_command_config",
    "load_experiment_config",
    "parse_duration",
    "parse_yaml",
    "read_source",
    "validate",
]
