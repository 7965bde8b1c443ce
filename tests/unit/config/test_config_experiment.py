from __future__ import annotations

import math

import pytest
from config_helpers import EXAMPLES, dump

from corral.domain.config import (
    CommandConfig,
    ConfigError,
    ExperimentConfig,
    S3Storage,
    command_job,
    expand_trials,
    load_command_config,
    load_experiment_config,
)


def exp(**fields: object) -> dict[str, object]:
    return {"name": "e", "entrypoint": "python3 train.py", **fields}


def problems(data: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_experiment_config(dump(data))
    return [str(p) for p in info.value.problems]


def test_defaults_match_determined() -> None:
    config = load_experiment_config(dump(exp()))
    assert config.max_restarts == 5
    assert config.priority == 42
    assert config.resources.slots_per_trial == 1
    assert config.searcher.name == "single"
    assert expand_trials(config) == [{}]


def test_example_experiment() -> None:
    config = load_experiment_config(EXAMPLES / "experiment.yaml")
    assert isinstance(config.checkpoint_storage, S3Storage)
    assert config.environment.environment_variables == {"PYTHONUNBUFFERED": "1"}
    trials = expand_trials(config)
    assert len(trials) == 6
    assert trials[0] == {"learning_rate": pytest.approx(1e-4), "batch_size": 32, "epochs": 2}
    assert trials[-1] == {"learning_rate": pytest.approx(1e-2), "batch_size": 64, "epochs": 2}


def test_single_takes_constants_first_choice_and_midpoints() -> None:
    hps = {
        "c": {"type": "const", "val": "x"},
        "plain": 3,
        "cat": {"type": "categorical", "vals": ["a", "b"]},
        "i": {"type": "int", "minval": 1, "maxval": 10},
        "d": {"type": "double", "minval": 0.0, "maxval": 1.0},
        "lg": {"type": "log", "base": 10, "minval": -4, "maxval": -2},
        "nested": {"a": 1},
    }
    (trial,) = expand_trials(load_experiment_config(dump(exp(hyperparameters=hps))))
    assert trial == {
        "c": "x",
        "plain": 3,
        "cat": "a",
        "i": 5,
        "d": 0.5,
        "lg": pytest.approx(1e-3),
        "nested": {"a": 1},
    }


def test_grid_is_the_cartesian_product() -> None:
    hps = {
        "i": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
        "d": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 2},
        "cat": {"type": "categorical", "vals": ["x", "y"]},
    }
    config = load_experiment_config(dump(exp(hyperparameters=hps, searcher={"name": "grid"})))
    trials = expand_trials(config)
    assert len(trials) == 12
    assert trials[:3] == [
        {"i": 1, "d": 0.0, "cat": "x"},
        {"i": 1, "d": 0.0, "cat": "y"},
        {"i": 1, "d": 1.0, "cat": "x"},
    ]


def test_grid_needs_counts_and_a_size_limit() -> None:
    no_count = exp(
        hyperparameters={"lr": {"type": "double", "minval": 0.1, "maxval": 1}},
        searcher={"name": "grid"},
    )
    assert problems(no_count) == ["hyperparameters.lr.count: required for the grid searcher"]
    huge = exp(
        hyperparameters={
            "a": {"type": "int", "minval": 0, "maxval": 1000, "count": 101},
            "b": {"type": "int", "minval": 0, "maxval": 1000, "count": 100},
        },
        searcher={"name": "grid"},
    )
    assert problems(huge) == ["searcher: grid of 10,100 trials exceeds the limit of 10,000"]


def test_random_is_seeded_and_in_range() -> None:
    hps = {
        "i": {"type": "int", "minval": 1, "maxval": 4},
        "lg": {"type": "log", "base": 2, "minval": 0, "maxval": 3},
        "cat": {"type": "categorical", "vals": [1, 2]},
    }
    data = exp(hyperparameters=hps, searcher={"name": "random", "max_trials": 20, "seed": 7})
    first = expand_trials(load_experiment_config(dump(data)))
    again = expand_trials(load_experiment_config(dump(data)))
    assert first == again
    assert len(first) == 20
    assert all(1 <= t["i"] <= 4 and 1 <= t["lg"] <= 8 and t["cat"] in (1, 2) for t in first)
    other = dict(data, searcher={"name": "random", "max_trials": 20, "seed": 8})
    assert expand_trials(load_experiment_config(dump(other))) != first
    unseeded = dict(data, searcher={"name": "random", "max_trials": 20})
    cfg = load_experiment_config(dump(unseeded))
    assert expand_trials(cfg) == expand_trials(cfg)  # derived seed: repeatable


def test_random_needs_max_trials() -> None:
    assert problems(exp(searcher={"name": "random"})) == [
        "searcher.max_trials: required for the random searcher"
    ]


def test_path_named_problems() -> None:
    data = exp(
        hyperparameters={
            "lr": {"type": "double", "minval": 1, "maxval": 0.1},
            "bad": {"type": "uniform"},
            "cat": {"type": "categorical", "vals": []},
            "lg": {"type": "log", "base": 1, "minval": 0, "maxval": 1},
        },
        searcher={"name": "bayes"},
        bind_mounts=[{"host_path": "data", "container_path": "/data"}],
        resources={"slots_per_trial": -1, "priority": 0},
        environment={"environment_variables": ["A=1", "oops"]},
        checkpoint_storage={"type": "s3"},
        max_restarts=-1,
        entrypoint=[],
    )
    assert problems(data) == [
        "resources.slots_per_trial: must be >= 0",
        "resources.priority: must be >= 1",
        "environment.environment_variables[1]: must be KEY=VALUE",
        "bind_mounts[0].host_path: must be an absolute path, got 'data'",
        "entrypoint: must be a string or a non-empty list of non-empty strings",
        "hyperparameters.lr.minval: must be <= maxval",
        "hyperparameters.bad.type: must be one of 'const', 'categorical', 'int', 'double', "
        "'log' (got 'uniform')",
        "hyperparameters.cat.vals: must not be empty",
        "hyperparameters.lg.base: must not be 1",
        "searcher.name: must be 'single', 'grid' or 'random'",
        "max_restarts: must be >= 0",
        "checkpoint_storage.bucket: required",
    ]


def test_determined_spellings_of_image_and_priority() -> None:
    config = load_experiment_config(dump(exp(environment={"image": "img:1"}, priority=10)))
    assert (config.image, config.priority) == ("img:1", 10)
    assert problems(exp(image="a", environment={"image": "b"})) == [
        "image: differs from environment.image: set only one"
    ]


def test_seed_command_config_and_command_job() -> None:
    command = load_command_config(EXAMPLES / "command.yaml")
    assert isinstance(command, CommandConfig)
    mount = command.bind_mounts[0]
    assert (mount.host_path, mount.container_path, mount.read_only) == (
        "/mnt/disks/second",
        "/second",
        True,
    )
    job = command_job(command, ["ls", "-l", "/second"])
    assert isinstance(job, ExperimentConfig)
    assert job.entrypoint == ("ls", "-l", "/second")
    assert job.name == "command: ls -l /second"
    assert job.max_restarts == 0
    assert job.bind_mounts == command.bind_mounts
    assert expand_trials(job) == [{}]
    with pytest.raises(ConfigError, match="entrypoint: required"):
        command_job(command, [])


def test_log_grid_points() -> None:
    data = exp(
        hyperparameters={"lr": {"type": "log", "minval": -3, "maxval": -1, "count": 3}},
        searcher={"name": "grid"},
    )
    values = [t["lr"] for t in expand_trials(load_experiment_config(dump(data)))]
    assert all(math.isclose(a, b) for a, b in zip(values, [1e-3, 1e-2, 1e-1], strict=True))
