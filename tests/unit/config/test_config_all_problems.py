"""Every independent problem of a config is reported in one load, not one layer at a time.

Field errors, cross-field rules of each model whose fields are valid enough to check, and
cluster-level rules (duplicate pool names, a missing default pool) all come out together, from
the loader (so the API and the handlers see them too, not only the CLI).
"""

from __future__ import annotations

from typing import Any

import pytest
from config_helpers import aws_pool, cluster_problems, dump, gcp_pool

from corral.domain.config import (
    ClusterConfig,
    CommandConfig,
    ConfigError,
    ExperimentConfig,
    cluster_config_from_mapping,
    load_experiment_config,
    validate,
)


def named(name: str, pool: dict[str, Any]) -> dict[str, Any]:
    return {**pool, "name": name}


def test_field_rule_and_duplicate_name_in_one_run() -> None:
    """The defect's example: a bad root_volume_size, min > max, and a duplicate pool name."""
    data = {
        "resource_pools": [
            aws_pool(root_volume_size=10, min_instances=3, max_instances=1),
            aws_pool(),
        ]
    }
    assert cluster_problems(data) == [
        "resource_pools[0].provider.root_volume_size: must be >= 100",
        "resource_pools[0].provider.max_instances: must be >= min_instances",
        "resource_pools[1].name: duplicate pool name 'default' (also resource_pools[0])",
    ]


def test_every_pool_and_the_cluster_rules() -> None:
    data = {
        "default_resource_pool": "nope",
        "resource_pools": [
            named("a", aws_pool(region="mars", min_instances=2, max_instances=1)),
            named("b", aws_pool(spot_max_price=1.5, image_id="img")),
            named("a", aws_pool(root_volume_size=1)),
            named("c", gcp_pool(boot_disk_size=5, min_instances=9, max_instances=2)),
        ],
    }
    assert cluster_problems(data) == [
        "resource_pools[0].provider.region: must be an AWS region such as us-east-1, got 'mars'",
        "resource_pools[0].provider.max_instances: must be >= min_instances",
        "resource_pools[1].provider.image_id: must be an AMI id such as "
        "ami-0123456789abcdef0, got 'img'",
        "resource_pools[1].provider.spot_max_price: only allowed with spot: true",
        "resource_pools[2].provider.root_volume_size: must be >= 100",
        "resource_pools[3].provider.boot_disk_size: must be >= 100",
        "resource_pools[3].provider.max_instances: must be >= min_instances",
        "resource_pools[2].name: duplicate pool name 'a' (also resource_pools[0])",
        "default_resource_pool: no pool named 'nope' (pools: a, b, c)",
    ]


def test_all_rules_of_one_provider() -> None:
    pool = aws_pool(
        min_instances=4,
        max_instances=2,
        master_url="ftp://x",
        spot_max_price=2,
        instance_type=["p3.8xlarge", "x9.mystery"],
        custom_tags=[{"key": "aws:x"}, {"key": "Name"}],
    )
    assert cluster_problems({"resource_pools": [pool]}) == [
        "resource_pools[0].provider.master_url: must start with http:// or https://",
        "resource_pools[0].provider.custom_tags[0].key: must not start with 'aws:'",
        "resource_pools[0].provider.custom_tags[1].key: 'Name' is set by Corral "
        "(ownership tag or instance name)",
        "resource_pools[0].provider.max_instances: must be >= min_instances",
        "resource_pools[0].provider.spot_max_price: only allowed with spot: true",
        "resource_pools[0].provider.instance_slots: required because instance type "
        "'x9.mystery' is not in the catalog (set the number of GPUs it has)",
    ]
    # The ownership tag key is a cross-field rule; it is checked next to other tags' problems.
    pool = aws_pool(tag_key="team", custom_tags=[{"key": "team"}], root_volume_size=1)
    assert cluster_problems({"resource_pools": [pool]}) == [
        "resource_pools[0].provider.root_volume_size: must be >= 100",
        "resource_pools[0].provider.custom_tags[0].key: 'team' is set by Corral "
        "(ownership tag or instance name)",
    ]


def test_gcp_rules_next_to_field_errors() -> None:
    pool = named(
        "Upper",
        gcp_pool(
            boot_disk_size=1,
            labels={"managed-by": "x", "Bad": "ok"},
            instance_type={"machine_type": "n1-standard-8", "gpu_num": 2},
        ),
    )
    assert cluster_problems({"resource_pools": [pool]}) == [
        "resource_pools[0].provider.boot_disk_size: must be >= 100",
        "resource_pools[0].provider.instance_type.gpu_type: required when gpu_num is set",
        "resource_pools[0].provider.labels.managed-by: is the ownership label (label_key)",
        "resource_pools[0].provider.labels.Bad: must be a GCP label key "
        "(lowercase letters, digits, '_' and '-', at most 63 characters)",
        "resource_pools[0].name: must be a valid GCP label value (lowercase letters, digits, "
        "'_' and '-', at most 63 characters): it labels instances",
    ]


def test_a_bad_value_does_not_invent_rule_problems() -> None:
    """A rule is checked only when the fields it reads are valid: no guesses from defaults."""
    pool = aws_pool(min_instances=3, max_instances="lots")
    assert cluster_problems({"resource_pools": [pool]}) == [
        "resource_pools[0].provider.max_instances: must be an integer",
    ]
    # A pool whose name is invalid is not counted as a duplicate or as the default.
    data = {
        "default_resource_pool": "x y",
        "resource_pools": [named("x y", aws_pool()), named("x y", aws_pool())],
    }
    assert cluster_problems(data) == [
        "resource_pools[0].name: must be 1-63 letters, digits, '_', '.' or '-', starting with "
        "a letter or digit",
        "resource_pools[1].name: must be 1-63 letters, digits, '_', '.' or '-', starting with "
        "a letter or digit",
    ]


def test_legacy_conflict_is_reported_with_the_pool_problems() -> None:
    data = {
        "provisioner": {"provider": "aws"},
        "resource_pools": [aws_pool(root_volume_size=1), aws_pool()],
    }
    assert cluster_problems(data) == [
        "provisioner: cannot be combined with resource_pools",
        "resource_pools[0].provider.root_volume_size: must be >= 100",
        "resource_pools[1].name: duplicate pool name 'default' (also resource_pools[0])",
    ]


def test_legacy_provisioner_rule_and_field_problems_together() -> None:
    data = {
        "provisioner": {
            "provider": "aws",
            "region": "us-west-2",
            "image_id": "ami-0123456789abcdef0",
            "instance_type": "p3.8xlarge",
            "root_volume_size": 1,
            "min_instances": 5,
            "max_instances": 1,
        },
        "resource_manager": {"default_compute_resource_pool": "gpu"},
    }
    assert cluster_problems(data) == [
        "provisioner.root_volume_size: must be >= 100",
        "provisioner.max_instances: must be >= min_instances",
        "resource_manager.default_compute_resource_pool: no pool named 'gpu' (pools: default)",
    ]


def test_model_validate_collects_too() -> None:
    """The models themselves collect (services validate stored configs with them)."""
    data = {
        "resource_pools": [
            aws_pool(root_volume_size=10, min_instances=3, max_instances=1),
            aws_pool(),
        ]
    }
    with pytest.raises(ConfigError) as info:
        cluster_config_from_mapping(data)
    assert len(info.value.problems) == 3
    with pytest.raises(ValueError) as raw:
        ClusterConfig.model_validate(data)
    text = str(raw.value)
    assert "root_volume_size" in text and "min_instances" in text and "duplicate" in text


def exp(**fields: object) -> dict[str, object]:
    return {"name": "e", "entrypoint": "python3 train.py", **fields}


def test_experiment_problems_at_every_layer() -> None:
    data = exp(
        image="a",
        environment={"image": "b"},
        priority=5,
        resources={"priority": 7, "slots_per_trial": -1},
        max_restarts=-1,
        hyperparameters={
            "lr": {"type": "double", "minval": 1, "maxval": 0},
            "n": {"type": "int", "minval": 0, "maxval": 4},
        },
        searcher={"name": "random"},
    )
    with pytest.raises(ConfigError) as info:
        load_experiment_config(dump(data))
    assert [str(p) for p in info.value.problems] == [
        "image: differs from environment.image: set only one",
        "priority: differs from resources.priority: set only one",
        "resources.slots_per_trial: must be >= 0",
        "hyperparameters.lr.minval: must be <= maxval",
        "searcher.max_trials: required for the random searcher",
        "max_restarts: must be >= 0",
    ]


def test_grid_rules_with_field_errors_elsewhere() -> None:
    data = exp(
        max_restarts=-1,
        hyperparameters={
            "a": {"type": "double", "minval": 0, "maxval": 1},
            "b": {"type": "int", "minval": 0, "maxval": 1},
        },
        searcher={"name": "grid"},
    )
    with pytest.raises(ConfigError) as info:
        validate(ExperimentConfig, data)
    assert [str(p) for p in info.value.problems] == [
        "max_restarts: must be >= 0",
        "hyperparameters.a.count: required for the grid searcher",
        "hyperparameters.b.count: required for the grid searcher",
    ]


def test_command_conflict_and_field_error() -> None:
    data = {"image": "a", "environment": {"image": "b"}, "bind_mounts": [{"host_path": "x"}]}
    with pytest.raises(ConfigError) as info:
        validate(CommandConfig, data)
    assert [str(p) for p in info.value.problems] == [
        "image: differs from environment.image: set only one",
        "bind_mounts[0].host_path: must be an absolute path, got 'x'",
        "bind_mounts[0].container_path: required",
    ]
