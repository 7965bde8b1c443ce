"""The ``reap_fallback_early`` pool setting: on by default, can be turned off, on both clouds,
and the reaper reads it from a config pool."""

from __future__ import annotations

import pytest
from config_helpers import aws_pool, dump, gcp_pool

from corral.domain.config import ConfigError, load_cluster_config


def cluster(pool: dict[str, object]) -> str:
    return dump({"resource_pools": [pool]})


def test_on_by_default_on_both_clouds() -> None:
    for pool in (aws_pool(spot=True), gcp_pool()):
        loaded = load_cluster_config(cluster(pool)).config.default_pool
        assert loaded.provider.reap_fallback_early is True
        assert loaded.reap_fallback_early is True


def test_can_be_turned_off() -> None:
    loaded = load_cluster_config(cluster(aws_pool(spot=True, reap_fallback_early=False)))
    assert loaded.config.default_pool.reap_fallback_early is False


def test_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as caught:
        load_cluster_config(cluster(aws_pool(reap_fallback_early="sometimes")))
    (problem,) = caught.value.problems
    assert problem.path == "resource_pools[0].provider.reap_fallback_early"
    assert problem.reason == "must be true or false"
