"""Configs too large to run or to store are refused by the loader, cheaply, with the limit
named: a grid axis of millions of points, a random search of 100,000 samples, a YAML alias
bomb, a document nested past any real config, strings the store cannot hold, an empty
argument in a command line."""

from __future__ import annotations

import time

import pytest
from config_helpers import dump

from corral.domain.config import (
    MAX_TRIALS,
    CommandConfig,
    ConfigError,
    command_job,
    load_experiment_config,
    parse_yaml,
)


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_experiment_config(text)
    return [(p.path, p.reason) for p in info.value.problems]


def exp(**fields: object) -> str:
    return dump({"name": "e", "entrypoint": "python3 train.py", **fields})


def test_a_grid_axis_of_millions_is_refused_without_building_it() -> None:
    grid = exp(
        searcher={"name": "grid"},
        hyperparameters={"lr": {"type": "double", "minval": 0, "maxval": 1, "count": 10**7}},
    )
    started = time.process_time()
    found = problems(grid)
    assert time.process_time() - started < 0.5  # not the 3 s of building 10 M points
    assert any(
        path == "hyperparameters.lr.count" and f"{MAX_TRIALS:,}" in reason for path, reason in found
    ), found


def test_a_random_search_beyond_the_limit_is_refused() -> None:
    found = problems(exp(searcher={"name": "random", "max_trials": 100_000}))
    assert [path for path, _ in found] == ["searcher.max_trials"]
    assert f"{MAX_TRIALS:,}" in found[0][1]


def test_a_yaml_alias_bomb_is_refused_before_anything_walks_it() -> None:
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        prev = chr(ord("a") + level - 1)
        here = chr(ord("a") + level)
        bomb.append(f"{here}: &{here} [" + ", ".join(f"*{prev}" for _ in range(10)) + "]")
    text = "\n".join(bomb) + "\nname: e\nentrypoint: python3 train.py\n"
    started = time.process_time()
    with pytest.raises(ConfigError) as info:
        parse_yaml(text)
    assert time.process_time() - started < 0.5
    (problem,) = info.value.problems
    assert "values" in problem.reason and "alias" in problem.reason


def test_a_document_nested_past_any_real_config_is_refused() -> None:
    deep = "x: " + "[" * 200 + "]" * 200 + "\n"
    with pytest.raises(ConfigError) as info:
        parse_yaml(deep)
    assert "nested" in info.value.problems[0].reason


def test_ordinary_anchors_and_aliases_still_load() -> None:
    text = (
        "name: e\nentrypoint: python3 train.py\n"
        "environment: &env {environment_variables: {A: '1'}}\n"
        "hyperparameters: {lr: 0.1, copy: *env}\n"
    )
    config = load_experiment_config(text)
    assert config.hyperparameters["copy"].model_dump()["val"] == {
        "environment_variables": {"A": "1"}
    }


def test_a_description_too_large_to_store_is_refused() -> None:
    found = problems(exp(description="x" * 20_000))
    assert [path for path, _ in found] == ["description"]


def test_an_empty_argument_in_a_command_line_names_it() -> None:
    with pytest.raises(ConfigError) as info:
        command_job(CommandConfig(), ["python3", "", "train.py"])
    assert [p.path for p in info.value.problems] == ["argv[1]"]


def test_a_config_too_large_to_store_is_refused_whatever_field_carries_it() -> None:
    found = problems(exp(environment={"environment_variables": {"BIG": "x" * 100_000}}))
    assert ("", "is 100,") in [(path, reason[:7]) for path, reason in found]
