"""Config loading applies the text rule (``corral.domain.text``) with the path: names are one
line of visible text, nothing anywhere holds a NUL or a lone surrogate. A stored config read
back (an agent's next trial) is not refused by the rule, so an old experiment keeps running."""

from __future__ import annotations

import pytest
from config_helpers import aws_pool, cluster_problems, dump

from corral.domain.config import (
    ConfigError,
    ExperimentConfig,
    load_cluster_config,
    load_experiment_config,
)
from corral.domain.config.errors import CUSTOM_ERROR_TYPE
from corral.domain.text import RULE_ERROR_TYPE


def experiment_problems(yaml_text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_experiment_config("entrypoint: python train.py\n" + yaml_text)
    return [str(p) for p in info.value.problems]


def test_the_rule_reports_through_the_configs_error_type() -> None:
    assert RULE_ERROR_TYPE == CUSTOM_ERROR_TYPE


@pytest.mark.parametrize(
    ("yaml_name", "reason"),
    [
        (r'"evil\e]0;pwned\a"', "must not contain control characters (\\x1b at character 5)"),
        (r'"one\ntwo"', "must not contain control characters (\\n at character 4)"),
        (r'"a\0b"', "must not contain a NUL character"),
        (
            r'"a\ud800"',
            "must be valid Unicode text, without lone surrogates (\\ud800 at character 2)",
        ),
        (r'"\u202egnp.exe"', "must not contain bidirectional controls (\\u202e at character 1)"),
        ("n" * 10_000, "must be at most 256 characters"),
        ('""', "must not be empty"),
    ],
    ids=["esc", "newline", "nul", "surrogate", "bidi", "10000", "empty"],
)
def test_an_experiment_name_is_one_short_line(yaml_name: str, reason: str) -> None:
    assert experiment_problems(f"name: {yaml_name}\n") == [f"name: {reason}"]


def test_every_problem_is_reported_with_its_path() -> None:
    problems = experiment_problems(
        'name: "a\\eb"\n'
        'description: "x\\ey"\n'
        "resources:\n"
        '  resource_pool: "gpu\\n"\n'
        "hyperparameters:\n"
        '  "lr\\t": 0.1\n'
        '  tags: {type: const, val: ["ok", "bad\\0"]}\n'
        "environment:\n"
        '  environment_variables: {"A\\eB": "1", "C": "d\\ud800"}\n'
    )
    assert problems == [
        "description: must not contain control characters other than tab and newline "
        "(\\x1b at character 2)",
        "resources.resource_pool: must not contain control characters (\\n at character 4)",
        "environment.environment_variables: name 'A\\x1bB' must not contain control "
        "characters (\\x1b at character 2)",
        "environment.environment_variables.C: must be valid Unicode text, without lone "
        "surrogates (\\ud800 at character 2)",
        "name: must not contain control characters (\\x1b at character 2)",
        "hyperparameters: name 'lr\\t' must not contain control characters (\\t at character 3)",
        "hyperparameters.tags.val[1]: must not contain a NUL character",
    ]


def test_a_stored_config_is_read_back_without_the_rule() -> None:
    # Submitted before the rule: stored as it was, and the agents' next trial reads it.
    stored = {
        "name": "old\x1b[31mname" + "x" * 300,
        "entrypoint": "python train.py",
        "hyperparameters": {"lr\t": 0.1},
        "environment": {"environment_variables": {"A\x1bB": "1"}},
    }
    assert ExperimentConfig.model_validate(stored).name == stored["name"]


def test_a_cluster_config_refuses_control_characters_in_pool_names() -> None:
    pool = aws_pool()
    for name in ("gpu\x1b[2J", "gpu\nx", "gpu\x00", "gpu\u202e"):
        problems = cluster_problems({"resource_pools": [{**pool, "name": name}]})
        assert len(problems) == 1 and problems[0].startswith("resource_pools[0].name: "), problems


def test_a_cluster_config_refuses_nul_and_surrogates_anywhere_with_the_path() -> None:
    pool = aws_pool(startup_script="echo hi\x00", instance_name="agent\ud800")
    problems = cluster_problems({"resource_pools": [pool]})
    assert problems == [
        "resource_pools[0].provider.startup_script: must not contain a NUL character",
        "resource_pools[0].provider.instance_name: must be valid Unicode text, without lone "
        "surrogates (\\ud800 at character 6)",
    ]


def test_a_valid_cluster_config_still_loads() -> None:
    loaded = load_cluster_config(dump({"resource_pools": [aws_pool(startup_script="a\nb\tc")]}))
    assert loaded.config.resource_pools[0].provider.startup_script == "a\nb\tc"
