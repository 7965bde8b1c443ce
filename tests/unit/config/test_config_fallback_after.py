"""The ``on_demand_fallback_after`` pool setting: a duration or ``never``, 10 minutes by
default, and how it combines with ``on_demand_fallback``."""

from __future__ import annotations

import pytest
from config_helpers import aws_pool, dump, gcp_pool

from corral.domain.config import ConfigError, load_cluster_config
from corral.domain.fallback import ON_DEMAND_FALLBACK_AFTER_S
from corral.domain.offerings import CapacityType


def pool_of(**settings: object):  # type: ignore[no-untyped-def]
    text = dump({"resource_pools": [aws_pool(spot=True, **settings)]})
    return load_cluster_config(text).config.default_pool


def capacity_types(pool) -> set[CapacityType]:  # type: ignore[no-untyped-def]
    return {o.capacity_type for o in pool.offerings()}


def test_ten_minutes_by_default_on_both_clouds() -> None:
    assert ON_DEMAND_FALLBACK_AFTER_S == 600.0
    for raw in (aws_pool(spot=True), gcp_pool()):
        pool = load_cluster_config(dump({"resource_pools": [raw]})).config.default_pool
        assert pool.on_demand_fallback_after_s == 600.0


@pytest.mark.parametrize(("value", "seconds"), [("5m", 300.0), ("0", 0.0), (90, 90.0)])
def test_takes_a_duration(value: object, seconds: float) -> None:
    pool = pool_of(on_demand_fallback_after=value)
    assert pool.on_demand_fallback_after_s == seconds
    assert capacity_types(pool) == {CapacityType.SPOT, CapacityType.ON_DEMAND}


def test_never_turns_fallback_off() -> None:
    pool = pool_of(on_demand_fallback_after="never")
    assert pool.on_demand_fallback_after_s is None
    assert capacity_types(pool) == {CapacityType.SPOT}
    assert pool.on_demand_fallback is True  # the other field reads as it was written


def test_on_demand_fallback_false_wins_over_any_delay() -> None:
    pool = pool_of(on_demand_fallback=False, on_demand_fallback_after="1m")
    assert pool.on_demand_fallback_after_s is None
    assert capacity_types(pool) == {CapacityType.SPOT}


def test_a_bad_value_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        pool_of(on_demand_fallback_after="soon")
    (problem,) = caught.value.problems
    assert problem.path == "resource_pools[0].provider.on_demand_fallback_after"
    assert "invalid duration 'soon'" in problem.reason and "or never" in problem.reason
    with pytest.raises(ConfigError) as caught:
        pool_of(on_demand_fallback_after="-5m")
    assert caught.value.problems[0].path.endswith("on_demand_fallback_after")
