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


# ---- numbers a trial could not receive: overflow, NaN and infinities ------------------------
FLOAT_LIMIT = "is out of range (a float holds up to about 1.8e308)"


@pytest.mark.parametrize("searcher", [{}, {"name": "grid"}, {"name": "random", "max_trials": 3}])
def test_a_log_range_past_the_largest_float_is_a_field_error(searcher: dict[str, object]) -> None:
    hps = {"a": {"type": "log", "base": 10, "minval": 1000, "maxval": 2000, "count": 3}}
    assert problems(exp(hyperparameters=hps, searcher=searcher)) == [
        f"hyperparameters.a.minval: 10**1000 {FLOAT_LIMIT}",
        f"hyperparameters.a.maxval: 10**2000 {FLOAT_LIMIT}",
    ]
    # A base below 1 overflows at the low end; only that end is named.
    below = {"a": {"type": "log", "base": 0.5, "minval": -2000, "maxval": 3}}
    assert problems(exp(hyperparameters=below)) == [
        f"hyperparameters.a.minval: 0.5**-2000 {FLOAT_LIMIT}"
    ]


def test_ranges_at_the_edge_of_floats_expand_to_finite_values() -> None:
    """What validates never overflows later: the midpoint, every grid point, every sample."""
    big = 10**400  # an integer range need not fit a float: grid points are exact
    hps = {
        "lg": {"type": "log", "base": 10, "minval": -300, "maxval": 308, "count": 3},
        "d": {"type": "double", "minval": 1.0e308, "maxval": 1.5e308, "count": 3},
        "i": {"type": "int", "minval": -big, "maxval": big, "count": 3},
    }
    for searcher in ({}, {"name": "grid"}, {"name": "random", "max_trials": 50}):
        config = load_experiment_config(dump(exp(hyperparameters=hps, searcher=searcher)))
        for trial in expand_trials(config):
            assert math.isfinite(trial["lg"]) and 1e-300 <= trial["lg"] <= 1e308
            assert math.isfinite(trial["d"]) and 1.0e308 <= trial["d"] <= 1.5e308
            assert -big <= trial["i"] <= big
    grid = load_experiment_config(dump(exp(hyperparameters=hps, searcher={"name": "grid"})))
    assert sorted({t["i"] for t in expand_trials(grid)}) == [-big, 0, big]
    (single,) = expand_trials(load_experiment_config(dump(exp(hyperparameters=hps))))
    assert single["d"] == 1.25e308


def test_ranges_wider_than_a_float_are_field_errors() -> None:
    hps = {
        "d": {"type": "double", "minval": -1.0e308, "maxval": 1.0e308},
        "big": {"type": "double", "minval": 0, "maxval": 10**400},
    }
    assert problems(exp(hyperparameters=hps)) == [
        "hyperparameters.d.maxval: maxval - minval is out of range (a float holds up to about "
        "1.8e308)",
        f"hyperparameters.big.maxval: {FLOAT_LIMIT}",
    ]


def test_nan_and_infinities_are_refused_wherever_a_hyperparameter_holds_a_number() -> None:
    inf, nan = math.inf, math.nan
    hps = {
        "a": {"type": "double", "minval": 0, "maxval": inf},
        "b": {"type": "const", "val": nan},
        "c": {"type": "double", "minval": nan, "maxval": nan},
        "lg": {"type": "log", "base": nan, "minval": -inf, "maxval": 1},
        "cat": {"type": "categorical", "vals": [1.0, -inf, {"x": [nan]}]},
        "plain": inf,
        "nested": {"opt": {"beta": [0.9, nan]}},
        "typed": {"type": "const", "val": {"x": [1, nan]}},
        "i": {"type": "int", "minval": nan, "maxval": 3},
        "fine": {"type": "const", "val": [1, 2.5, {"y": -0.0}]},
    }
    assert problems(exp(hyperparameters=hps)) == [
        "hyperparameters.a.maxval: must be a finite number",
        "hyperparameters.b.val: must be a finite number",
        "hyperparameters.c.minval: must be a finite number",
        "hyperparameters.c.maxval: must be a finite number",
        "hyperparameters.lg.minval: must be a finite number",
        "hyperparameters.lg.base: must be a finite number",
        "hyperparameters.cat.vals[1]: must be a finite number",
        "hyperparameters.cat.vals[2].x[0]: must be a finite number",
        "hyperparameters.plain: must be a finite number",
        "hyperparameters.nested.opt.beta[1]: must be a finite number",
        "hyperparameters.typed.val.x[1]: must be a finite number",
        "hyperparameters.i.minval: must be a finite number",
    ]


# ---- environment variables: names a process can get, values with one spelling -------------
RULE = "must be non-empty, without =, spaces or NUL"


def test_environment_variable_names_must_reach_the_process() -> None:
    variables = {"": "a", "A=B": "c", "X Y": "d", True: "e", 2: "f", "a\0": "h", "a.b-c": "i"}
    assert problems(exp(environment={"environment_variables": variables})) == [
        f"environment.environment_variables: name '' {RULE}",
        f"environment.environment_variables: name 'A=B' {RULE}",
        f"environment.environment_variables: name 'X Y' {RULE}",
        "environment.environment_variables: name true must be a string: quote it",
        "environment.environment_variables: name 2 must be a string: quote it",
        f"environment.environment_variables: name 'a\\x00' {RULE}",
    ]


def test_environment_variable_values_are_strings_numbers_or_booleans() -> None:
    ok = {"S": "x y", "I": 1, "F": 0.5, "T": True, "N": False, "_lower9": "", "D": "=x"}
    config = load_experiment_config(dump(exp(environment={"environment_variables": ok})))
    assert config.environment.environment_variables == {
        "S": "x y",
        "I": "1",
        "F": "0.5",
        "T": "true",  # as YAML and JSON spell it, not Python's True
        "N": "false",
        "_lower9": "",
        "D": "=x",
    }
    # A YAML date keeps its spelling.
    dated = load_experiment_config(
        "entrypoint: x\nenvironment:\n  environment_variables:\n    DAY: 2024-01-31\n"
    )
    assert dated.environment.environment_variables == {"DAY": "2024-01-31"}
    bad = {"B": None, "C": [1], "M": {"x": 1}, "NAN": math.nan, "Z": "a\0b"}
    assert problems(exp(environment={"environment_variables": bad})) == [
        "environment.environment_variables.B: must be a string, a number or a boolean, not null "
        '(write "" for an empty value)',
        "environment.environment_variables.C: must be a string, a number or a boolean, not a "
        "list (quote it to pass it as written)",
        "environment.environment_variables.M: must be a string, a number or a boolean, not a "
        "mapping (quote it to pass it as written)",
        "environment.environment_variables.NAN: must be a finite number",
        "environment.environment_variables.Z: must not contain a NUL character",
    ]


def test_environment_variables_as_a_key_value_list_are_checked_alike() -> None:
    listed = ["A=1", "B=x=y", "A=2", "=z", 3, "1A=2", "X Y=1", "C=a\0b"]
    assert problems(exp(environment={"environment_variables": listed})) == [
        "environment.environment_variables[2]: sets A again (as [0] does)",
        "environment.environment_variables[3]: must be KEY=VALUE",
        "environment.environment_variables[4]: must be KEY=VALUE",
        f"environment.environment_variables[6]: name 'X Y' {RULE}",
        "environment.environment_variables[7]: must not contain a NUL character",
    ]
    config = load_experiment_config(
        dump(exp(environment={"environment_variables": ["A=1", "B=x=y"]}))
    )
    assert config.environment.environment_variables == {"A": "1", "B": "x=y"}


# ---- NUL characters: execve and docker cannot carry them ------------------------------------
def test_nul_characters_are_refused_where_a_trial_is_started_with_them() -> None:
    data = exp(
        entrypoint=["python", "t\0.py"],
        image="img\0",
        bind_mounts=[{"host_path": "/data\0", "container_path": "/data"}],
    )
    assert problems(data) == [
        "image: must not contain a NUL character",
        "bind_mounts[0].host_path: must not contain a NUL character",
        "entrypoint[1]: must not contain a NUL character",
    ]
    assert problems(exp(entrypoint="python t.py\0")) == [
        "entrypoint: must not contain a NUL character"
    ]
    command = load_command_config(EXAMPLES / "command.yaml")
    with pytest.raises(ConfigError) as info:
        command_job(command, ["ls", "a\0b", ""])
    assert [str(p) for p in info.value.problems] == [
        "argv[1]: must not contain a NUL character",
        "argv[2]: must not be empty",
    ]
