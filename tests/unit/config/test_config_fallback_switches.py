"""The pool switches of on-demand fallback capacity (`reap_fallback_early`,
`move_fallback_to_spot`): on by default on both clouds, can be turned off, reach the pool
policy, and a bad value is named by its path."""

from __future__ import annotations

import pytest
from config_helpers import aws_pool, dump, gcp_pool

from corral.domain.config import ConfigError, load_cluster_config

SWITCHES = ("reap_fallback_early", "move_fallback_to_spot")


def cluster(pool: dict[str, object]) -> str:
    return dump({"resource_pools": [pool]})


@pytest.mark.parametrize("switch", SWITCHES)
def test_on_by_default_on_both_clouds(switch: str) -> None:
    for pool in (aws_pool(spot=True), gcp_pool()):
        loaded = load_cluster_config(cluster(pool)).config.default_pool
        assert getattr(loaded.provider, switch) is True
        assert getattr(loaded, switch) is True


@pytest.mark.parametrize("switch", SWITCHES)
def test_can_be_turned_off(switch: str) -> None:
    loaded = load_cluster_config(cluster(aws_pool(spot=True, **{switch: False})))
    assert getattr(loaded.config.default_pool, switch) is False


@pytest.mark.parametrize("switch", SWITCHES)
def test_must_be_a_boolean(switch: str) -> None:
    for pool in (aws_pool(**{switch: "sometimes"}), gcp_pool(**{switch: "later"})):
        with pytest.raises(ConfigError) as caught:
            load_cluster_config(cluster(pool))
        (problem,) = caught.value.problems
        assert problem.path == f"resource_pools[0].provider.{switch}"
        assert problem.reason == "must be true or false"
