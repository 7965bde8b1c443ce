"""`move_fallback_to_spot`: on by default on both clouds, can be turned off, reaches the
pool policy, and a bad value is named by its path."""

from __future__ import annotations

import pytest
from config_helpers import aws_pool, dump, gcp_pool

from corral.domain.config import ConfigError, load_cluster_config


def cluster(pool: dict[str, object]) -> str:
    return dump({"resource_pools": [pool]})


def test_on_by_default_on_both_clouds() -> None:
    for pool in (aws_pool(spot=True), gcp_pool()):
        loaded = load_cluster_config(cluster(pool)).config.default_pool
        assert loaded.provider.move_fallback_to_spot is True
        assert loaded.move_fallback_to_spot is True


def test_can_be_turned_off() -> None:
    loaded = load_cluster_config(cluster(aws_pool(spot=True, move_fallback_to_spot=False)))
    assert loaded.config.default_pool.move_fallback_to_spot is False


def test_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as caught:
        load_cluster_config(cluster(gcp_pool(move_fallback_to_spot="later")))
    (problem,) = caught.value.problems
    assert problem.path == "resource_pools[0].provider.move_fallback_to_spot"
    assert problem.reason == "must be true or false"
